package checker

import (
	"slices"
	"sync"
)

// Transcript records what one subscriber received, across the streams
// (segments) it opened. It is safe for concurrent use, by the goroutine
// that reads the streams and by the test.
type Transcript struct {
	mu       sync.Mutex // guards segments
	segments []segment
}

// segment is what one stream delivered.
type segment struct {
	token  string // the resume token it was opened with; "" for a fresh start
	events []Event
	err    error // how it ended, once it has
}

// Open records that a new stream begins, from resumeToken ("" for a fresh
// start).
func (t *Transcript) Open(resumeToken string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.segments = append(t.segments, segment{token: resumeToken})
}

// Record records an event of the current stream. An event before any Open
// begins a fresh one.
func (t *Transcript) Record(e Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.segments) == 0 {
		t.segments = append(t.segments, segment{})
	}
	s := &t.segments[len(t.segments)-1]
	s.events = append(s.events, e)
}

// Close records that the current stream ended with err (nil when cleanly).
func (t *Transcript) Close(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.segments) > 0 {
		t.segments[len(t.segments)-1].err = err
	}
}

// LastToken is the token of the last event recorded, or of the last Open
// when none was since: where to resume.
func (t *Transcript) LastToken() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.segments) == 0 {
		return ""
	}
	s := t.segments[len(t.segments)-1]
	if len(s.events) == 0 {
		return s.token
	}
	return s.events[len(s.events)-1].ResumeToken
}

// Events returns every event recorded, of all streams, in order.
func (t *Transcript) Events() []Event {
	var all []Event
	for _, s := range t.snapshot() {
		all = append(all, s.events...)
	}
	return all
}

func (t *Transcript) snapshot() []segment {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Record only appends: it never writes the events these slices hold.
	return slices.Clone(t.segments)
}

// Segments counts the streams recorded.
func (t *Transcript) Segments() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.segments)
}

// Copy returns a transcript of what t holds now, which its streams' later
// events do not change: a check reads it while they go on.
func (t *Transcript) Copy() *Transcript {
	return &Transcript{segments: t.snapshot()}
}
