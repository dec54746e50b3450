package hubclient

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// reconnection is what a stream that reconnects by itself (a Watcher's, a
// ManyWatcher's, a Counter's) knows of its failures: the attempts that
// failed in a row, the wait before the next, and how far the current
// stream got. It logs each failure and the recovery, so that a caller
// whose watch delivers nothing sees why, and when it flows again.
type reconnection struct {
	client *Client
	// failures counts the attempts since the last response: each that
	// failed, or whose stream ended before it delivered one. The backoff
	// grows with them, so a hub that accepts streams and then fails them
	// (while the API server is down, say) is not asked again at once.
	failures int
	wait     time.Duration // before the next attempt
	// up is set once the current stream was established (the hub sent its
	// headers, or a response); delivered, once it delivered a response:
	// only then does its end interrupt a running stream rather than fail
	// an attempt.
	up, delivered bool
}

// attempt waits out the backoff, then returns the API to open the stream
// on and the endpoint's index. err ends the stream: ctx ended, or the
// client was closed. With neither, a nil API means that the endpoint could
// not be used; the failure has been counted: attempt again.
func (r *reconnection) attempt(ctx context.Context, log *slog.Logger) (informerhubv1.InformerHubServiceClient, int, error) {
	svc, endpoint, err := r.client.attempt(ctx, r.wait)
	if err == nil && svc == nil {
		r.failed(status.Error(codes.Unavailable, "the endpoint could not be used"), endpoint, log)
	}
	return svc, endpoint, err
}

// established records that the stream is up, and says so if it took
// attempts. The failures stand until it delivers (responded).
func (r *reconnection) established(log *slog.Logger) {
	if r.up {
		return
	}
	if r.failures > 0 {
		log.Info("reconnected to the hub", "attempts", r.failures)
	}
	r.up = true
}

// responded records that the stream delivered a response: the failures
// are over.
func (r *reconnection) responded(log *slog.Logger) {
	r.established(log)
	r.failures, r.wait, r.delivered = 0, 0, true
}

// failed records that the stream, on endpoint, ended with err (a status
// error) and is to be reconnected: it logs why, marks the endpoint failed
// when the hub there is the cause, and sets the wait before the next
// attempt. The end of a running stream is logged at info: a hub that goes
// away (a rolling update) is routine, and resuming loses nothing. Every
// attempt that fails after it, or before the stream ever ran, is a
// warning with its number.
func (r *reconnection) failed(err error, endpoint int, log *slog.Logger) {
	st := status.Convert(err)
	log = log.With("code", st.Code().String(), "error", st.Message())
	interrupted, established := r.delivered, r.up
	r.up, r.delivered = false, false
	switch st.Code() {
	case codes.Unauthenticated:
		// Only on a running stream (callers end the others): the
		// credentials it opened with expired. The token source's current
		// ones go at once.
		r.wait = 0
		log.Info("the hub no longer accepts the credentials this watch started with; reconnecting")
		return
	case codes.ResourceExhausted:
		// This client did not keep up, or opened or called too much; the
		// hub is fine: no other replica, but a backoff.
		r.failures++
		r.wait = r.client.cfg.backoff.delay(r.failures)
		log.Warn("the hub refused or disconnected this watch; retrying after a backoff", "attempt", r.failures, "backoff", r.wait.Round(time.Millisecond))
		return
	}
	r.client.failed(endpoint)
	if interrupted {
		r.wait = r.client.cfg.backoff.delay(1)
		log.Info("watch interrupted; reconnecting", "backoff", r.wait.Round(time.Millisecond))
		return
	}
	r.failures++
	r.wait = r.client.cfg.backoff.delay(r.failures)
	msg := "not connected to the hub; retrying after a backoff"
	if established {
		msg = "the hub ended the stream before it delivered anything; retrying after a backoff"
	}
	log.Warn(msg, "attempt", r.failures, "backoff", r.wait.Round(time.Millisecond))
}
