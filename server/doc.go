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
// Wire it up with ServerOptions, EncodeEvent and Register:
//
//	hub := informerhub.New(informerhub.Config{EncodeEvent: server.EncodeEvent}, resolver, source)
//	g := grpc.NewServer(server.ServerOptions()...)
//	server.New(hub, server.Config{}).Register(g)
package server
