package server

import (
	"math"
	"net/http"

	"connectrpc.com/connect"
	connectcors "connectrpc.com/cors"
	"connectrpc.com/grpcreflect"
	"github.com/rs/cors"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/informerhub/informerhub/gen/informerhub/v1/informerhubv1connect"
)

// HTTPServices are what HTTPHandler serves beside the hub's service.
type HTTPServices struct {
	// Health, when set, is grpc.health.v1 (Check and Watch), answered by
	// the same health.Server as over native gRPC, through HealthService.
	Health *health.Server
	// Other serves every other path (the console); nil: 404.
	Other http.Handler
}

// HTTPHandler serves the service over HTTP/1.1 and HTTP/2 with connect-go:
// the Connect protocol (JSON and binary), gRPC-Web and gRPC, every call
// through the same interceptors and handlers as on grpc-go (connect.go);
// grpc.health.v1 and gRPC server reflection, for buf curl; and every other
// path with extra.Other.
//
// Every response says X-Content-Type-Options: nosniff. Browsers on the
// origins of Config.CORSAllowedOrigins may call the service (CORS, its
// preflight answered here); other origins get no CORS headers, so browsers
// refuse them. Responses are not compressed: the hub encodes each event
// once for all its subscribers, and compressing it again per stream would
// cost CPU per subscriber.
func (s *Server) HTTPHandler(extra HTTPServices) http.Handler {
	opts := []connect.HandlerOption{
		connect.WithCodec(connectCodec{}),
		connect.WithCodec(connectCodec{json: true}),
		connect.WithReadMaxBytes(s.cfg.MaxRecvMsgSize),
		// Requests may come gzipped; responses never are.
		connect.WithCompressMinBytes(math.MaxInt32),
	}
	mux := http.NewServeMux()
	path, service := informerhubv1connect.NewInformerHubServiceHandler(connectService{s}, opts...)
	mux.Handle(path, s.httpCall(service))
	services := []string{informerhubv1connect.InformerHubServiceName}
	if extra.Health != nil {
		s.handleHealth(mux, s.HealthService(extra.Health), opts)
		services = append(services, healthpb.Health_ServiceDesc.ServiceName)
	}
	reflector := grpcreflect.NewStaticReflector(services...)
	// A reflection stream's requests come within the listener's
	// ReadTimeout (oneport.Config): buf curl asks, and is done in a moment.
	for _, handle := range []func(*grpcreflect.Reflector, ...connect.HandlerOption) (string, http.Handler){grpcreflect.NewHandlerV1, grpcreflect.NewHandlerV1Alpha} {
		path, h := handle(reflector, opts[2:]...)
		mux.Handle(path, s.httpCall(h))
	}
	if extra.Other != nil {
		mux.Handle("/", extra.Other)
	}
	var h http.Handler = mux
	if len(s.cfg.CORSAllowedOrigins) > 0 {
		h = cors.New(cors.Options{
			AllowedOrigins: s.cfg.CORSAllowedOrigins,
			AllowedMethods: connectcors.AllowedMethods(),
			// Bearer tokens, not cookies: no credentials mode.
			AllowedHeaders: append(connectcors.AllowedHeaders(), "Authorization"),
			ExposedHeaders: append(connectcors.ExposedHeaders(), ResumeTokenHeader),
			MaxAge:         2 * 60 * 60,
		}).Handler(h)
	}
	return noSniff(h)
}

// noSniff tells browsers to take every response as its Content-Type says.
func noSniff(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}
