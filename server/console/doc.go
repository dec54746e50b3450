// Package console serves the hub's web console: a page that signs in with
// a bearer token, picks a resource type and a selection, and shows its
// objects live over the Connect protocol, on the hub's own port.
//
// The page is built from console/ (TypeScript, on clients/web) into dist/
// by `make generate`, committed, and embedded here, so that building the
// hub needs no Node.js and the page loads nothing from anywhere else. Its
// responses carry a strict Content-Security-Policy: scripts and styles
// only from the hub, nothing inline, no framing.
package console
