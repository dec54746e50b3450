package feed

import "sync"

// Ending is how a subscription, a WatchMany or a counter ends: once, when
// it can deliver no more. Its done channel is closed then, and the
// function given to after runs then, in a goroutine of its own: so a
// caller blocked elsewhere, in a send to a client that stopped reading,
// can give up on that client without a goroutine waiting on done for it
// (as context.AfterFunc does for a context, at a fraction of a context's
// memory: a replica holds 100,000 of these). The channel is made when
// first asked for: a subscription's reader asks ended instead.
type Ending struct {
	mu sync.Mutex // guards the fields below
	// ended is set once it has ended.
	ended bool
	// ch is done's channel, once asked for; closed once it has ended.
	ch   chan struct{}
	then func()
}

// Close ends it; the first call does.
func (e *Ending) Close() {
	e.mu.Lock()
	if e.ended {
		e.mu.Unlock()
		return
	}
	e.ended = true
	if e.ch != nil {
		close(e.ch)
	}
	then := e.then
	e.then = nil
	e.mu.Unlock()
	if then != nil {
		go then()
	}
}

// IsEnded reports whether it has ended.
func (e *Ending) IsEnded() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ended
}

// Done returns a channel closed once it has ended.
func (e *Ending) Done() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ch == nil {
		e.ch = make(chan struct{})
		if e.ended {
			close(e.ch)
		}
	}
	return e.ch
}

// After arranges for f to run, in its own goroutine, once it has ended (at
// once if it has), in place of any function given before; stop cancels
// that.
func (e *Ending) After(f func()) (stop func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		go f()
		return func() {}
	}
	e.then = f
	return e.stop
}

func (e *Ending) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.then = nil
}
