// Package projection keeps only some fields of Kubernetes objects' JSON, as
// the paths of a request's fields say. It works on the JSON in place
// (internal/jsonscan): what it keeps are the API server's own bytes, in the
// API server's order, read once.
//
// A Tree is a set of paths to keep; a Projection is a request's paths, with
// the identity every projected object keeps, and the key that tells
// requests asking for the same fields apart from the rest.
package projection
