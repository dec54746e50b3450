// Package export is the core of informerhub-export (issue 41): routes,
// each a hub Watch through the Go SDK whose changes a sink publishes, with
// the position to resume from written in the same write as the change it
// follows, so that an exporter that dies anywhere resumes exactly after
// the last change the sink holds: nothing lost, nothing repeated that a
// consumer sees.
//
// A Route (route.go) reads the resume point its Sink holds, watches from
// it, and hands the sink each change (change.go: its deterministic id, the
// token after it) in order. Sinks: JetStream (jetstream.go), which keeps
// the resume point in the last message; CloudEvents over HTTP
// (cloudevents.go), which keeps it in a FileCheckpoint (checkpoint.go);
// Kafka (kafka.go), which writes each batch and its resume point in one
// transaction.
// LoadConfig (config.go) reads informerhub-export's configuration file.
package export
