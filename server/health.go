package server

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// HealthService returns grpc.health.v1 as h answers it, but for Watch: a
// health.Server's Watch runs until its client leaves, and would hold the
// shutdown until its deadline (grpc.Server.GracefulStop and
// http.Server.Shutdown wait for every call); this one ends with
// UNAVAILABLE and SHUTTING_DOWN once Drain has returned. Register it on the
// grpc.Server; HTTPHandler serves it over HTTP.
func (s *Server) HealthService(h *health.Server) healthpb.HealthServer {
	return drainingHealth{Server: h, drained: s.drained}
}

type drainingHealth struct {
	*health.Server
	drained context.Context // done once Drain has returned
}

func (h drainingHealth) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	defer context.AfterFunc(h.drained, cancel)()
	err := h.Server.Watch(req, watchWithContext{Health_WatchServer: stream, ctx: ctx})
	if h.drained.Err() != nil && stream.Context().Err() == nil {
		return shuttingDownStatus(nil, nil)
	}
	return err
}

// watchWithContext is a health Watch's stream with a context of its own.
type watchWithContext struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

func (w watchWithContext) Context() context.Context { return w.ctx }

// handleHealth serves grpc.health.v1 on mux with h, the health service of
// native gRPC, so that both say the same. (connectrpc.com/grpchealth would
// need a second source of the statuses, and cannot watch this one.)
func (s *Server) handleHealth(mux *http.ServeMux, h healthpb.HealthServer, opts []connect.HandlerOption) {
	mux.Handle(healthpb.Health_Check_FullMethodName, s.httpCall(connect.NewUnaryHandler(healthpb.Health_Check_FullMethodName,
		func(ctx context.Context, req *connect.Request[healthpb.HealthCheckRequest]) (*connect.Response[healthpb.HealthCheckResponse], error) {
			resp, err := h.Check(ctx, req.Msg)
			if err != nil {
				return nil, connectError(err)
			}
			return connect.NewResponse(resp), nil
		}, opts...)))
	mux.Handle(healthpb.Health_Watch_FullMethodName, s.httpCall(connect.NewServerStreamHandler(healthpb.Health_Watch_FullMethodName,
		func(ctx context.Context, req *connect.Request[healthpb.HealthCheckRequest], stream *connect.ServerStream[healthpb.HealthCheckResponse]) error {
			return connectError(h.Watch(req.Msg, healthWatchStream{ctx: ctx, stream: stream}))
		}, opts...)))
}

// healthWatchStream is the stream health.Server.Watch sends on, which sends
// from the handler's own goroutine: no send outlives the call.
type healthWatchStream struct {
	grpc.ServerStream // health.Server uses only Context and Send
	ctx               context.Context
	stream            *connect.ServerStream[healthpb.HealthCheckResponse]
}

func (s healthWatchStream) Context() context.Context { return s.ctx }

func (s healthWatchStream) Send(resp *healthpb.HealthCheckResponse) error { return s.stream.Send(resp) }
