package informerhub

import (
	"context"

	"github.com/informerhub/informerhub/informerhub/internal/stream"
)

// Subscription is one subscriber's stream of events. Next must be called
// from one goroutine at a time; Close may be called from any.
//
// It starts at the feed's position or a resume token's; sends initial
// events first, when asked; replays from the API server a token the
// history no longer holds; catches up from the history; then reads live
// changes through a bounded queue. A live subscriber that falls behind
// reads on from the history; it ends (*TooSlowError) only if the history
// no longer holds its position by the time it reads on. See package
// internal/stream for how.
type Subscription struct {
	st stream.Stream
}

// Next returns the next event. It blocks until there is one, the context
// ends, or the subscription fails. A failed subscription returns the same
// error on every later call.
func (s *Subscription) Next(ctx context.Context) (*Event, error) { return s.st.Next(ctx) }

// Done is closed when the subscription can deliver no more: it fell behind
// further than the history, its informer stopped, or it was closed. Next
// then returns Err. A caller blocked elsewhere (in a send to a client that
// stopped reading) can watch Done to give up on that client.
func (s *Subscription) Done() <-chan struct{} { return s.st.Done() }

// Handed tells the subscription that its transport has taken the event
// Next returned last, encoded, and is about to write it: the writes of its
// connection need not wait for it any longer (see Woken). Without it, Next
// says so itself when called again. Call it from the goroutine that calls
// Next.
func (s *Subscription) Handed() { s.st.Handed() }

// AfterFail arranges for f to run, in its own goroutine, once Done is
// closed (at once if it is), as context.AfterFunc does for a context; stop
// cancels that. A caller blocked elsewhere, in a send to a client that
// stopped reading, learns of the failure without a goroutine waiting on
// Done.
func (s *Subscription) AfterFail(f func()) (stop func()) { return s.st.AfterFail(f) }

// Err returns why the subscription failed, once Done is closed; otherwise
// nil.
func (s *Subscription) Err() error { return s.st.Err() }

// ResumeToken returns the token of the last event Next returned, or the one
// the subscription started from. It may be called from any goroutine.
func (s *Subscription) ResumeToken() string { return s.st.ResumeToken() }

// Close ends the subscription and releases its informer.
// A Next blocked in another goroutine returns ErrSubscriptionClosed.
func (s *Subscription) Close() { s.st.Close() }
