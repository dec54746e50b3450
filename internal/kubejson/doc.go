// Package kubejson reads Kubernetes objects, lists and watch streams as the
// API server writes them in JSON, in one pass per object: it checks each
// object's syntax as encoding/json does and decodes only the metadata the
// hub keys, selects and resumes by (type, name, namespace, uid,
// resourceVersion, labels, the initial-events-end annotation), leaving the
// rest as the API server's own bytes.
//
// It agrees with encoding/json, matching keys case-sensitively as the API
// server's decoder does, on every field it decodes and on which documents
// are malformed: FuzzDecodeHeader and FuzzDecodeEvent check this, and the
// integration suite checks it on the API server's output for every type it
// serves.
package kubejson
