package server

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/informerhub/informerhub/server/auth"
)

// rechecker re-authorizes a running Watch's caller, and decides when the
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
// Its methods are called from the stream's supervising goroutine; a recheck
// runs in a goroutine of its own, so that a slow API server delays nothing
// else. A nil *rechecker never rechecks.
type rechecker struct {
	check    func(context.Context) error
	interval time.Duration
	log      *slog.Logger
	timer    *time.Timer
	// result is non-nil while a recheck runs, for its result.
	result chan error
	// confirmed is when a recheck last confirmed access; denied is set
	// when one was denied, for the next, soon, to confirm it.
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
	r := &rechecker{check: check, interval: interval, log: log, confirmed: time.Now()}
	r.timer = time.NewTimer(r.next())
	return r
}

// next is how long until the next recheck.
func (r *rechecker) next() time.Duration { return r.interval*3/4 + rand.N(r.interval/2) }

// due is closed when a recheck is due; start it then.
func (r *rechecker) due() <-chan time.Time {
	if r == nil {
		return nil
	}
	return r.timer.C
}

// results delivers the result of the recheck running; hand it to decide.
func (r *rechecker) results() <-chan error {
	if r == nil {
		return nil
	}
	return r.result
}

// start starts a recheck, bounded by ctx and an interval, unless one runs
// still; and schedules the next.
func (r *rechecker) start(ctx context.Context) {
	r.timer.Reset(r.next())
	if r.result != nil {
		return // the last one still runs, within its timeout
	}
	result := make(chan error, 1)
	r.result = result
	fresh := r.denied
	go func() {
		ctx, cancel := context.WithTimeout(ctx, r.interval)
		defer cancel()
		if fresh {
			ctx = withFreshDecisions(ctx)
		}
		result <- r.check(ctx)
	}()
}

// decide takes a recheck's result, and returns an *accessLostError when
// the stream must end for it.
func (r *rechecker) decide(err error) error {
	r.result = nil
	var unavailable *authUnavailableError
	var forbidden *auth.ForbiddenError
	switch {
	case err == nil:
		r.confirmed, r.denied = time.Now(), false
	case errors.As(err, &forbidden) && !r.denied:
		r.denied = true
		r.timer.Reset(denialConfirmDelay)
		r.log.Info("a recheck denied a stream's access; confirming it", "error", err)
	case errors.As(err, &unavailable) && time.Since(r.confirmed) < maxUnconfirmedRechecks*r.interval:
		// The API server cannot answer now: keep the stream, as the hub's
		// own informers keep their data, and ask again at the next
		// recheck; but not forever.
		r.log.Warn("cannot recheck a stream's access; asking again later", "error", err)
	default:
		r.log.Info("ending a stream whose access was not confirmed", "error", err)
		return &accessLostError{err: err}
	}
	return nil
}

// stop stops the rechecks. A recheck still running is not waited for: its
// context ends with the stream.
func (r *rechecker) stop() {
	if r != nil {
		r.timer.Stop()
	}
}
