package feed

import (
	"sync"
	"time"
)

// readiness is what a feed knows of its upstream, as the kube-apiserver
// cacher's ready does: whether its initial list is in the store, why its
// lists fail before then, and since when its lists and watches have failed
// with nothing delivered, to end the feed when they keep failing (see
// Config.MaxUpstreamFailure). Its channels are read by anyone; its other
// fields are guarded by its feed's mu, which orders them with the changes
// the feed takes.
type readiness struct {
	synced     chan struct{} // closed when the initial list is in the store
	listFailed chan struct{} // closed when a list fails before the first sync
	closeOnce  sync.Once     // of listFailed

	listErr error // the last list error before the first sync
	// progressAt is when the upstream last delivered anything (a list, a
	// change, a bookmark); failingSince is when its lists and watches
	// started failing since then (zero while they do not), and lastErr the
	// last failure.
	progressAt, failingSince time.Time
	lastErr                  error
	// staleCheck ends the feed if it is still failing MaxUpstreamFailure
	// after it started to; stopped with the feed.
	staleCheck *time.Timer
}

func newReadiness() readiness {
	return readiness{synced: make(chan struct{}), listFailed: make(chan struct{})}
}

// markSynced tells the waiters the initial list is in the store.
func (r *readiness) markSynced() { close(r.synced) }

// failedToList records a list that failed before the first sync, and wakes
// the waiters, so that clients learn of it rather than hang.
func (r *readiness) failedToList(err error) {
	r.listErr = err
	r.closeOnce.Do(func() { close(r.listFailed) })
}

// progressed records that the upstream delivered something at now: it is
// not failing.
func (r *readiness) progressed(now time.Time) {
	r.progressAt, r.failingSince, r.lastErr = now, time.Time{}, nil
}

// recovered records that a watch opened: the upstream is no longer failing,
// though it has delivered nothing since.
func (r *readiness) recovered() { r.failingSince, r.lastErr = time.Time{}, nil }

// failed records a list or watch that failed after the first sync. When it
// starts a run of failures, check runs after maxFailure (see stale).
func (r *readiness) failed(err error, now time.Time, maxFailure time.Duration, check func()) {
	r.lastErr = err
	if !r.failingSince.IsZero() {
		return
	}
	r.failingSince = now
	if r.staleCheck != nil {
		r.staleCheck.Stop()
	}
	r.staleCheck = time.AfterFunc(maxFailure, check)
}

// stale reports whether the upstream has failed, with nothing delivered,
// for maxFailure by now; and the last failure. A run of failures that
// ended since, or a newer one, is not stale: a later failure armed its own
// check.
func (r *readiness) stale(now time.Time, maxFailure time.Duration) (stale bool, failingFor time.Duration, lastErr error) {
	if r.failingSince.IsZero() || now.Sub(r.failingSince) < maxFailure {
		return false, 0, nil
	}
	return true, now.Sub(r.failingSince), r.lastErr
}

// stop stops the check of a feed that stopped.
func (r *readiness) stop() {
	if r.staleCheck != nil {
		r.staleCheck.Stop()
	}
}
