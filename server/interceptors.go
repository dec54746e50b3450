package server

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"strings"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	grpcauth "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/informerhub/informerhub/server/auth"
)

// ServerOptions returns the grpc.ServerOptions of a server of this service,
// for grpc.NewServer: the codec that sends shared encoded events, the limits
// of cfg, and go-grpc-middleware's interceptors, outermost first:
//
//   - metrics (cfg.Metrics, when set): every call counted and timed, those
//     refused by the interceptors below included;
//   - logging: one line per finished call, with the caller's identity;
//     health checks are not logged;
//   - authentication with cfg.Authenticator; health checks and reflection
//     need none (probes and grpcurl's discovery reveal no data);
//   - a rate limit per identity;
//   - recovery: a panic becomes INTERNAL for that call, never a crash. It
//     runs innermost, so a handler's panic is logged like any failed call,
//     and outermost too, for a panic in the interceptors themselves (an
//     Authenticator's, say).
func ServerOptions(cfg Config) []grpc.ServerOption {
	cfg.setDefaults()
	log := cfg.Logger
	logger := logging.LoggerFunc(func(ctx context.Context, level logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(level), msg, fields...)
	})
	notHealth := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
		return c.Service != healthService
	})
	needsAuth := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
		return c.Service != healthService && !strings.HasPrefix(c.Service, "grpc.reflection.")
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
		logging.AddFields(ctx, logging.Fields{"user", user.Name})
		return auth.WithUser(ctx, user), nil
	}
	limiter := auth.NewRateLimiter(cfg.RatePerIdentity, cfg.RateBurstPerIdentity)
	recover := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.Error("panic in a call", "panic", p, "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error")
	})
	logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall)}
	unary := []grpc.UnaryServerInterceptor{recovery.UnaryServerInterceptor(recover)}
	stream := []grpc.StreamServerInterceptor{recovery.StreamServerInterceptor(recover)}
	if cfg.Metrics != nil {
		unary = append(unary, cfg.Metrics.GRPC.UnaryServerInterceptor())
		stream = append(stream, cfg.Metrics.GRPC.StreamServerInterceptor())
	}
	unary = append(unary,
		selector.UnaryServerInterceptor(logging.UnaryServerInterceptor(logger, logOpts...), notHealth),
		selector.UnaryServerInterceptor(grpcauth.UnaryServerInterceptor(authenticate), needsAuth),
		selector.UnaryServerInterceptor(ratelimit.UnaryServerInterceptor(limiter), needsAuth),
		recovery.UnaryServerInterceptor(recover),
	)
	stream = append(stream,
		selector.StreamServerInterceptor(logging.StreamServerInterceptor(logger, logOpts...), notHealth),
		selector.StreamServerInterceptor(grpcauth.StreamServerInterceptor(authenticate), needsAuth),
		selector.StreamServerInterceptor(ratelimit.StreamServerInterceptor(limiter), needsAuth),
		recovery.StreamServerInterceptor(recover),
	)

	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(codec{proto: encoding.GetCodecV2("proto")}),
		grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams),
		grpc.MaxRecvMsgSize(cfg.MaxRecvMsgSize),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: cfg.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	}
}

const healthService = "grpc.health.v1.Health"
