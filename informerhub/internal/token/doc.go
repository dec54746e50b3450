// Package token reads and writes resume tokens: what a token says (the
// resource type, a position in its feed, and for initial events the
// selection and the last object sent), sealed against damage with a
// CRC-32C and versioned, and the composite tokens of WatchMany, whose
// header names the watches they resume. Tokens are opaque to clients; the
// proto says what they promise, docs/architecture.md why they hold. It
// holds no state and no lock.
package token
