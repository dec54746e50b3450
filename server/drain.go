package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/informerhub/informerhub/informerhub"
)

// A replica that stops must not send every client elsewhere at once: the
// other replicas would take a reconnect, a TokenReview and a
// SubjectAccessReview per stream in the same instant. Drain ends streams
// a few at a time over a period, as the kube-apiserver's
// --shutdown-watch-termination-grace-period does for its watches.

// errDraining is the cause with which Drain cancels a Watch's or Count's
// context.
var errDraining = errors.New("draining")

// drainedError ends a Watch (or Count) that Drain ended: the client
// resumes from resumeToken, on another replica; a Count, which has none,
// leaves it empty.
type drainedError struct{ resumeToken string }

func (e *drainedError) Error() string { return informerhub.ErrClosed.Error() }
func (e *drainedError) Unwrap() error { return informerhub.ErrClosed }

// watches is the running Watches, WatchManys and Counts of a Server, for
// Drain.
type watches struct {
	mu       sync.Mutex // guards the fields below
	running  map[*streamRun]struct{}
	draining bool
	// allEnded is closed once draining and none is left running.
	allEnded chan struct{}
}

// start records a running stream (a Watch, WatchMany or Count), which
// Drain ends with errDraining, and returns it; or reports false once the
// server is draining. Call end when the stream ends.
func (w *watches) start(s *Server, stream grpc.ServerStream) (*streamRun, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.draining {
		return nil, false
	}
	if w.running == nil {
		w.running = map[*streamRun]struct{}{}
	}
	r := s.newStreamRun(stream, "")
	w.running[r] = struct{}{}
	return r, true
}

// end records that r has ended, and stops its timers.
func (w *watches) end(r *streamRun) {
	r.finish()
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.running, r)
	if w.draining && len(w.running) == 0 && w.allEnded != nil {
		close(w.allEnded)
		w.allEnded = nil
	}
}

func (w *watches) isDraining() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.draining
}

// Drain stops admitting Watch, Snapshot and Count calls (they are refused
// with UNAVAILABLE, SHUTTING_DOWN), then ends the running Watches and
// Counts one by one, evenly spread over period, each with UNAVAILABLE,
// SHUTTING_DOWN and (a Watch) the token of the last response it sent, so
// that their clients move to other replicas a few at a time and resume
// exactly. A Watch waiting for a replay slot ends the same way. Drain
// returns once they have all ended, or when ctx ends; health Watches
// (HealthService) end then. Snapshots under way are left to finish.
func (s *Server) Drain(ctx context.Context, period time.Duration) error {
	defer s.markDrained()
	s.watches.mu.Lock()
	s.watches.draining = true
	running := make([]*streamRun, 0, len(s.watches.running))
	for r := range s.watches.running {
		running = append(running, r)
	}
	allEnded := make(chan struct{})
	if len(running) == 0 {
		close(allEnded)
	} else {
		s.watches.allEnded = allEnded
	}
	s.watches.mu.Unlock()
	if len(running) == 0 {
		return nil
	}
	s.log.Info("draining: ending streams over the drain period", "streams", len(running), "period", period)
	gap := period / time.Duration(len(running))
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i, r := range running {
		if i > 0 {
			timer.Reset(gap)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		r.end(errDraining, s.cfg.StalledSendGrace)
	}
	select {
	case <-allEnded:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
