package server

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"strings"

	"connectrpc.com/connect"
	grpcauth "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/informerhub/informerhub/server/auth"
	"github.com/informerhub/informerhub/server/metrics"
)

// interceptors are go-grpc-middleware's interceptors of the service, built
// once per Server so that every protocol shares their state (the rate limit
// per identity): grpc-go runs them for native gRPC (ServerOptions), the
// connect-go adapter for Connect, gRPC-Web and its gRPC (connect.go).
// Outermost first:
//
//   - metrics (cfg.Metrics, when set): every call counted and timed, those
//     refused by the interceptors below included, labelled with its
//     protocol;
//   - logging: one line per finished call, with the caller's identity;
//     health checks are not logged;
//   - authentication with cfg.Authenticator; health checks and reflection
//     need none (probes and grpcurl's discovery reveal no data);
//   - a rate limit per identity;
//   - recovery: a panic becomes INTERNAL for that call, never a crash. It
//     runs outermost, for a panic in the interceptors themselves (an
//     Authenticator's, say), and innermost for unary calls, so that a
//     handler's panic is logged like any failed call; the stream handlers
//     turn their panics into errors themselves (streamRun.serve,
//     onOwnStack), so streams have no innermost recovery, whose frame
//     would stay on each stream's stack as long as it runs.
type interceptors struct {
	unary  []grpc.UnaryServerInterceptor
	stream []grpc.StreamServerInterceptor
	// grpcStream is stream for grpc-go's calls, all native gRPC: without
	// the step that picks a protocol's metrics.
	grpcStream []grpc.StreamServerInterceptor
	// rate is the rate limit per identity, which WatchMany charges once
	// more per watch beyond the first.
	rate *auth.RateLimiter
}

func newInterceptors(cfg Config) interceptors {
	log := cfg.Logger
	logger := logging.LoggerFunc(func(ctx context.Context, level logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(level), msg, spreadCallLog(fields)...)
	})
	authenticate := func(ctx context.Context) (context.Context, error) {
		user, err := cfg.Authenticator.Authenticate(ctx)
		var tooManyReviews *auth.TooManyReviewsError
		switch {
		case errors.Is(err, auth.ErrUnauthenticated), errors.As(err, &tooManyReviews):
			return nil, toStatus(log, err)
		case err != nil:
			return nil, toStatus(log, &authUnavailableError{err: err})
		}
		callLogOf(ctx).user = user.Name
		return auth.WithUser(ctx, user), nil
	}
	limiter := auth.NewRateLimiter(cfg.RatePerIdentity, cfg.RateBurstPerIdentity)
	recover := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.Error("panic in a call", "panic", p, "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error")
	})
	// A stream keeps its fields for as long as it runs, twice: none that
	// grpc.service and grpc.method already say (grpc.component is always
	// "server", grpc.method_type the method's).
	logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall), logging.WithFieldsFromContext(callLogField),
		logging.WithDisableLoggingFields(logging.ComponentFieldKey, logging.MethodTypeFieldKey)}
	var ic interceptors
	ic.unary = []grpc.UnaryServerInterceptor{recovery.UnaryServerInterceptor(recover)}
	ic.stream = []grpc.StreamServerInterceptor{recovery.StreamServerInterceptor(recover)}
	ic.grpcStream = []grpc.StreamServerInterceptor{recovery.StreamServerInterceptor(recover)}
	if cfg.Metrics != nil {
		// Each protocol's calls count in its own metrics (Metrics.Calls);
		// grpc-go's are all native gRPC.
		unary := map[string]grpc.UnaryServerInterceptor{}
		stream := map[string]grpc.StreamServerInterceptor{}
		for _, protocol := range metrics.Protocols {
			unary[protocol] = cfg.Metrics.Calls(protocol).UnaryServerInterceptor()
			stream[protocol] = cfg.Metrics.Calls(protocol).StreamServerInterceptor()
		}
		ic.unary = append(ic.unary, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			return unary[protocolOf(ctx)](ctx, req, info, handler)
		})
		ic.stream = append(ic.stream, func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			return stream[protocolOf(ss.Context())](srv, ss, info, handler)
		})
		ic.grpcStream = append(ic.grpcStream, stream[connect.ProtocolGRPC])
	}
	ic.unary = append(ic.unary,
		unlessUnary(isHealth, logging.UnaryServerInterceptor(logger, logOpts...)),
		unlessUnary(needsNoAuth, grpcauth.UnaryServerInterceptor(authenticate)),
		unlessUnary(needsNoAuth, ratelimit.UnaryServerInterceptor(limiter)),
		recovery.UnaryServerInterceptor(recover),
	)
	// The stream handlers turn their own panics into INTERNAL (see
	// streamRun.serve, onOwnStack), so a stream has no recovery innermost:
	// each interceptor's frame stays on a stream's stack for as long as it
	// runs.
	rest := []grpc.StreamServerInterceptor{
		unlessStream(isHealth, logging.StreamServerInterceptor(logger, logOpts...)),
		unlessStream(needsNoAuth, grpcauth.StreamServerInterceptor(authenticate)),
		unlessStream(needsNoAuth, ratelimit.StreamServerInterceptor(limiter)),
	}
	ic.stream = append(ic.stream, rest...)
	ic.grpcStream = append(ic.grpcStream, rest...)
	ic.rate = limiter
	return ic
}

// runUnary runs a unary call through the interceptors, as grpc-go does.
func (ic interceptors) runUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	for i := len(ic.unary) - 1; i >= 0; i-- {
		interceptor, next := ic.unary[i], handler
		handler = func(ctx context.Context, req any) (any, error) { return interceptor(ctx, req, info, next) }
	}
	return handler(ctx, req)
}

// runStream runs a streaming call through the interceptors, as grpc-go
// does.
func (ic interceptors) runStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	for i := len(ic.stream) - 1; i >= 0; i-- {
		interceptor, next := ic.stream[i], handler
		handler = func(srv any, ss grpc.ServerStream) error { return interceptor(srv, ss, info, next) }
	}
	return handler(srv, ss)
}

// ServerOptions returns the grpc.ServerOptions of a grpc.Server of this
// service, for grpc.NewServer: the codec that sends shared encoded events,
// the limits of the Server's Config, and its interceptors.
func (s *Server) ServerOptions() []grpc.ServerOption {
	cfg := s.cfg
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(codec{proto: encoding.GetCodecV2("proto")}),
		// A connection's writer batches what it has to write up to this
		// before it writes to the socket: a change's events to a
		// connection's streams, which package cork lets gather, leave in
		// one write, not one per 32 KiB. The buffer is taken from a pool
		// for each write and given back after, so an idle connection holds
		// none.
		grpc.WriteBufferSize(writeBufferSize),
		grpc.SharedWriteBuffer(true),
		// What clients send the hub is small (requests, window updates,
		// pings): a connection's read buffer need not be gRPC's 32 KiB,
		// and 100,000 streams over 1,000 connections keep 1,000 of them.
		grpc.ReadBufferSize(readBufferSize),
		grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams),
		grpc.MaxRecvMsgSize(cfg.MaxRecvMsgSize),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(s.interceptors.unary...),
		grpc.ChainStreamInterceptor(s.interceptors.grpcStream...),
	}
}

const healthService = "grpc.health.v1.Health"

// isHealth tells the health checks' calls, which are not logged;
// needsNoAuth, those that need no authentication: health checks, and
// reflection (probes and grpcurl's discovery reveal no data).
func isHealth(fullMethod string) bool { return strings.HasPrefix(fullMethod, "/"+healthService+"/") }

func needsNoAuth(fullMethod string) bool {
	return isHealth(fullMethod) || strings.HasPrefix(fullMethod, "/grpc.reflection.")
}

// unlessStream runs interceptor for the calls skip does not tell, as
// go-grpc-middleware's selector does, in a frame a fifth of its size: it
// stays on every stream's stack for as long as the stream runs.
func unlessStream(skip func(fullMethod string) bool, interceptor grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if skip(info.FullMethod) {
			return handler(srv, ss)
		}
		return interceptor(srv, ss, info, handler)
	}
}

// unlessUnary is unlessStream for unary calls.
func unlessUnary(skip func(fullMethod string) bool, interceptor grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if skip(info.FullMethod) {
			return handler(ctx, req)
		}
		return interceptor(ctx, req, info, handler)
	}
}

// writeBufferSize is what a connection's writer batches before it writes
// (grpc.WriteBufferSize), as much as package cork holds at most;
// readBufferSize is what a connection reads at most at once.
const (
	writeBufferSize = 256 << 10
	readBufferSize  = 8 << 10
)
