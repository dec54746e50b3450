// Package server serves an informerhub.Hub as the gRPC service
// informerhub.v1.InformerHubService.
//
// It adds what a transport needs and nothing else: request conversion; a
// stream served by its handler's goroutine alone, watched by a timer that
// ends it when its client stops reading or its caller loses access, and
// cuts off a send blocked on such a client (stream.go), so that an idle
// stream costs one goroutine; a codec that sends each shared event as the
// bytes the hub encoded once (codec.go); and the one mapping from the hub's
// errors to gRPC statuses with google.rpc error details (status.go).
//
// Callers are authenticated by an interceptor (package auth); each Watch,
// Snapshot and Count is authorized for the caller with a
// SubjectAccessReview, and a running Watch or Count again every
// AuthzRecheckInterval.
//
// The same calls are served over HTTP (HTTPHandler: the Connect protocol,
// gRPC-Web and gRPC, by connect-go), through the same interceptors and
// handlers (connect.go); package oneport serves both on one listener.
//
// Wire it up with EncodeEvent, ServerOptions, Register and HTTPHandler:
//
//	hub := informerhub.New(informerhub.Config{EncodeEvent: server.EncodeEvent}, resolver, source)
//	srv := server.New(hub, server.Config{Authenticator: authn, Authorizer: authz})
//	g := grpc.NewServer(append(srv.ServerOptions(), grpc.Creds(oneport.Credentials()))...)
//	srv.Register(g)
//	oneport.New(oneport.Config{GRPC: g, HTTP: srv.HTTPHandler(server.HTTPServices{Other: console.Handler()})}).Serve(lis)
package server
