package server

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/informerhub/informerhub/server/auth"
)

// rechecker re-authorizes a running stream's caller, and decides when the
// stream must end for it: when access is revoked (confirmed by a second,
// fresh review, denialConfirmDelay later: an API server that has just
// started denies what its RBAC caches have not loaded yet), when its
// credentials are no longer accepted, or when the API server has not
// confirmed access for maxUnconfirmedRechecks intervals.
//
// Rechecks come between three quarters and one and a quarter of an interval
// apart, at random: streams opened together (a client reconnecting a
// thousand of them) drift apart and spread their reviews over the interval
// rather than ask all at once, while a decision one of them made serves the
// others of the same identity and request (see Server.recheckAccess); and
// each recheck still finds its own previous decision too old to reuse.
//
// Its stream's watchdog runs it (streamRun.fire): one recheck at a time,
// each bounded by an interval, the next scheduled once it has decided.
type rechecker struct {
	check    func(context.Context) error
	interval time.Duration
	log      *slog.Logger
	// Owned by the recheck running: confirmed is when a recheck last
	// confirmed access; denied is set when one was denied, for the next,
	// soon, to confirm it.
	confirmed time.Time
	denied    bool
}

// denialConfirmDelay is how long after a recheck denied a stream's access
// another, with a fresh decision, confirms it before the stream ends.
const denialConfirmDelay = 2 * time.Second

// maxUnconfirmedRechecks is how many recheck intervals a stream may run
// without the API server confirming its caller's access, before it ends
// with UNAVAILABLE: an outage does not end streams at once, nor leave them
// running unauthorized.
const maxUnconfirmedRechecks = 3

type freshDecisionsKey struct{}

// withFreshDecisions marks a recheck that must not reuse a cached decision.
func withFreshDecisions(ctx context.Context) context.Context {
	return context.WithValue(ctx, freshDecisionsKey{}, true)
}

func newRechecker(check func(context.Context) error, interval time.Duration, log *slog.Logger) *rechecker {
	return &rechecker{check: check, interval: interval, log: log, confirmed: time.Now()}
}

// next is how long until the next recheck.
func (r *rechecker) next() time.Duration { return r.interval*3/4 + rand.N(r.interval/2) }

// run runs one recheck, bounded by an interval.
func (r *rechecker) run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.interval)
	defer cancel()
	if r.denied {
		ctx = withFreshDecisions(ctx)
	}
	return r.check(ctx)
}

// decide takes a recheck's result, and returns when the next is due, or
// an *accessLostError when the stream must end for it.
func (r *rechecker) decide(err error) (time.Duration, error) {
	var unavailable *authUnavailableError
	var forbidden *auth.ForbiddenError
	switch {
	case err == nil:
		r.confirmed, r.denied = time.Now(), false
	case errors.As(err, &forbidden) && !r.denied:
		r.denied = true
		r.log.Info("a recheck denied a stream's access; confirming it", "error", err)
		return denialConfirmDelay, nil
	case errors.As(err, &unavailable) && time.Since(r.confirmed) < maxUnconfirmedRechecks*r.interval:
		// The API server cannot answer now: keep the stream, as the hub's
		// own informers keep their data, and ask again at the next
		// recheck; but not forever.
		r.log.Warn("cannot recheck a stream's access; asking again later", "error", err)
	default:
		r.log.Info("ending a stream whose access was not confirmed", "error", err)
		return 0, &accessLostError{err: err}
	}
	return r.next(), nil
}
