// Package upstream is the hub's side of the API server: which resource
// types the cluster serves (Discovery, and the selectable fields of custom
// resources from their CRDs: CRDFields), and the lists and watches of one
// type's informer (Source). It reads the API server's JSON into Objects in
// one pass per object (internal/kubejson): an object's bytes are kept as
// they came, and only the metadata the hub uses is decoded, in the pass that
// checks the object's syntax. The hub never builds an Unstructured map of an
// object, and never re-encodes one, so each event costs one parse and
// subscribers see the API server's own JSON.
package upstream
