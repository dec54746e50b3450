// Package server serves an informerhub.Hub as the gRPC service
// informerhub.v1.InformerHubService.
//
// It adds what a transport needs and nothing else: request conversion, one
// sending goroutine per stream (so a stream stuck on a client that stopped
// reading can be ended without blocking anyone), a codec that sends each
// shared event as the bytes the hub encoded once (codec.go), and the one
// mapping from the hub's errors to gRPC statuses with google.rpc error
// details (status.go).
//
// Callers are authenticated by an interceptor (package auth); each Watch and
// Snapshot is authorized for the caller with a SubjectAccessReview, and a
// running Watch again every AuthzRecheckInterval.
//
// Wire it up with ServerOptions, EncodeEvent and Register, passing the same
// Config to ServerOptions and New:
//
//	hub := informerhub.New(informerhub.Config{EncodeEvent: server.EncodeEvent}, resolver, source)
//	cfg := server.Config{Authenticator: authn, Authorizer: authz}
//	g := grpc.NewServer(server.ServerOptions(cfg)...)
//	server.New(hub, cfg).Register(g)
package server
