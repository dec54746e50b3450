// Package metrics is the hub's Prometheus instrumentation: gRPC server
// metrics from go-grpc-middleware's prometheus provider, the hub's own
// metrics per resource type, snapshot latency, build information, and the
// Go runtime and process collectors.
//
// Everything is registered on a registry of its own, built by New: nothing
// is registered globally, so tests and embedders can run several hubs in
// one process. The hub's metrics are read from informerhub.Hub.Stats at
// scrape time, so they cost the event path nothing but a few atomic adds.
package metrics
