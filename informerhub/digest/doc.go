// Package digest computes the digest of a set of Kubernetes objects, by
// which a client checks that what it holds is what the hub holds, and the
// hub that what it holds is what the API server holds.
//
// An object's hash is the first 16 bytes of the SHA-256 of its namespace,
// name, uid and resourceVersion, each followed by a NUL byte, read as a
// big-endian unsigned 128-bit integer; a set's digest is the sum of its
// objects' hashes modulo 2^128. The sum does not depend on order, and it
// follows a change at the cost of one hash: add the new state's hash,
// subtract the old one's. The encoding is unambiguous although a name may
// hold a NUL byte: the namespace, uid and resourceVersion never do, so the
// name is what lies between the first NUL and the third from the end.
//
// The proto (DigestResponse) states the same for clients in any language;
// this package is the hub's side of it and the Go SDK's.
package digest
