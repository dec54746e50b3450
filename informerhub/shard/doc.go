// Package shard reads and evaluates Kubernetes shard selectors (KEP-5866,
// ListOptions.shardSelector): `shardRange(object.metadata.uid, '0x…',
// '0x…')`, OR-ed with `||`, over object.metadata.uid or
// object.metadata.namespace. An object is selected when the FNV-1a 64-bit
// hash of that field falls in one of the ranges.
//
// It selects exactly what an API server with the ShardedListAndWatch gate
// selects: selectors are parsed by the API server's own parser
// (k8s.io/apiserver/pkg/sharding), and bounds compare as its
// k8s.io/apimachinery/pkg/sharding compares them, quirks included: a bound
// of fewer than 16 hex digits sorts below every hash, one of more above
// every hash. Ranges are kept as numbers, so that matching costs one hash
// per object and field, and Index finds the selectors a hash falls in with
// a binary search, however many there are.
package shard
