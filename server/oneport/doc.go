// Package oneport serves a grpc.Server and an http.Handler on one
// listener, as Argo CD's server and etcd do: each connection goes to
// grpc-go when its first request is native gRPC (HTTP/2, content-type
// application/grpc), and to an http.Server otherwise: HTTP/1.1, and HTTP/2
// (h2c in plaintext, ALPN under TLS) for the Connect protocol, gRPC-Web and
// the console.
//
// Connections are told apart by cmux, reading (and buffering) at most the
// first request's headers, within SniffTimeout. grpc-go keeps its own
// transport, so native gRPC costs what it did on a listener of its own;
// serving it through net/http (grpc.Server.ServeHTTP) would be slower.
//
// Under TLS the listener makes the handshake, so that cmux can read the
// first request: the grpc.Server takes the connections as they are with
// Credentials, which hands grpc-go the TLS state, and the http.Server's
// requests carry it in their context (peer.FromContext), as gRPC's do.
package oneport
