// Package natstest starts a real nats-server with JetStream, as a process,
// for the tests of what publishes to NATS (informerhub-export's JetStream
// sink): as internal/controlplane starts kube-apiserver and etcd.
//
// Start runs the server on free loopback ports with JetStream's file
// storage in a directory of the test's, and returns once the server
// answers its monitoring endpoint's /healthz, which in a single server
// also means that the streams on disk are recovered. The test's end stops
// it. Between, a test can Stop, Kill (SIGKILL) and Start it again, or
// Restart it: on the same ports with the same store, so that clients
// reconnect to the same URL and find the same streams.
//
// The binary is built from the module proxy by `make nats-server` (see
// tools/nats) into .cache/tools/bin; NATS_SERVER_BIN overrides where it is
// looked for.
package natstest
