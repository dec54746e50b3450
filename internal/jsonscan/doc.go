// Package jsonscan reads JSON documents in place: it finds where values
// start and end without decoding them, so that a reader of a few fields
// (field selectors) or a copier of parts (projections) pays one scan, no
// allocation per value, and keeps the document's own bytes.
//
// The input is usually JSON an API server produced, but nothing here trusts
// it: every function is bounded by the input's length, never recurses on
// it, and returns ErrBadJSON rather than panicking on anything malformed.
package jsonscan
