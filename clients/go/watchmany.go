package hubclient

import (
	"context"
	"errors"
	"io"
	"iter"
	"log/slog"
	"slices"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// ManyWatch is one watch of a WatchMany: what it selects, and where it
// starts (Options.ResumeToken, an event's token of that watch, wins over
// the WatchMany's own token for it) and what its events carry.
type ManyWatch struct {
	Selector Selector
	Options  WatchOptions
}

// ManyEvent is one event of a WatchMany.
type ManyEvent struct {
	// Index is the watch the event belongs to, in the order given.
	Index int
	// Event is the watch's event; its ResumeToken resumes that watch
	// alone.
	Event
	// ManyResumeToken resumes every watch right after this event (give it
	// to WatchMany).
	ManyResumeToken string
	// AllInitialEventsEnd is set on the event that ends the last watch's
	// initial events: every watch with SendInitialEvents has sent them.
	AllInitialEventsEnd bool
}

// ManyWatcher delivers the events of several watches on one stream: first
// the initial events of those that asked for them, then every watch's
// changes as they happen, each watch's in its own order. Like a Watcher, it
// reconnects on its own, with backoff, moving to another replica when one
// fails, and resumes every watch exactly from the last event it delivered.
//
// Errors that retrying cannot fix end it, as they end a Watcher; one that
// concerns one watch carries that watch's index (WatchIndex). Unlike a
// Watcher, it does not re-sync a watch the hub can no longer resume
// (OUT_OF_RANGE): it ends with that error. To go on, take a Snapshot of
// that watch's selector and start a new WatchMany from ResumeToken, with
// that watch's Options.ResumeToken set to the snapshot's token (or drop
// the watch: the others resume without it).
//
// A ManyWatcher is for one goroutine; Close may be called from any.
type ManyWatcher struct {
	client  *Client
	watches []ManyWatch
	ctx     context.Context
	cancel  context.CancelFunc

	stream       grpc.ServerStreamingClient[informerhubv1.WatchManyResponse]
	streamCancel context.CancelFunc
	endpoint     int

	token        string // composite: of the last event delivered, or the start
	tokenFromHub bool   // the hub issued token: it holds every watch's position
	reconnection        // its failures, the backoff, and their logging
	err          error
}

// WatchMany starts several watches on one stream, from resumeToken (a
// ManyEvent's ManyResumeToken; empty: each watch as its Options say). The
// watches of a resumeToken are matched to these by what they select, so
// watches may be dropped, added or changed and the rest resume. It
// connects on the first call to Next; read events with Next (or All) until
// it returns an error, and Close it when done.
func (c *Client) WatchMany(ctx context.Context, watches []ManyWatch, resumeToken string) *ManyWatcher {
	ctx, cancel := context.WithCancel(ctx)
	watches = slices.Clone(watches)
	for i := range watches {
		watches[i].Options.Fields = slices.Clone(watches[i].Options.Fields)
	}
	return &ManyWatcher{client: c, watches: watches, ctx: ctx, cancel: cancel, token: resumeToken, reconnection: reconnection{client: c}}
}

// Close ends the watches; Next then returns context.Canceled.
func (m *ManyWatcher) Close() { m.cancel() }

// ResumeToken returns the token of the last event Next returned (or the
// one the watches started from): WatchMany from it continues exactly
// there.
func (m *ManyWatcher) ResumeToken() string { return m.token }

// All returns the events as an iterator, which ends after the error that
// ends the watches; breaking out of it closes them.
func (m *ManyWatcher) All() iter.Seq2[ManyEvent, error] {
	return func(yield func(ManyEvent, error) bool) {
		defer m.Close()
		for {
			e, err := m.Next()
			if !yield(e, err) || err != nil {
				return
			}
		}
	}
}

// Next returns the next event of any watch. It blocks until there is one,
// reconnecting as often as needed, and returns an error only when the
// watches have ended.
func (m *ManyWatcher) Next() (ManyEvent, error) {
	for {
		if m.err == nil && m.ctx.Err() != nil {
			m.err = m.ctx.Err()
		}
		if m.err != nil {
			return ManyEvent{}, m.err
		}
		if m.stream == nil {
			m.connect()
			continue
		}
		resp, err := m.stream.Recv()
		if err != nil {
			m.streamFailed(err)
			continue
		}
		if int(resp.GetIndex()) >= len(m.watches) {
			m.streamFailed(status.Errorf(codes.Internal, "the hub sent an event of watch %d of %d", resp.GetIndex(), len(m.watches)))
			continue
		}
		if !m.delivered { // a check first: the logger is made only when needed
			m.responded(m.log())
		}
		if resp.GetResumeToken() != "" {
			m.token, m.tokenFromHub = resp.GetResumeToken(), true
		}
		return ManyEvent{Index: int(resp.GetIndex()), Event: eventOf(resp.GetEvent()),
			ManyResumeToken: resp.GetResumeToken(), AllInitialEventsEnd: resp.GetInitialEventsEnd()}, nil
	}
}

// log is the client's logger, with the number of watches.
func (m *ManyWatcher) log() *slog.Logger { return m.client.cfg.log.With("watches", len(m.watches)) }

// connect opens a stream, after the backoff its failures call for.
func (m *ManyWatcher) connect() {
	svc, endpoint, err := m.attempt(m.ctx, m.log())
	switch {
	case err != nil:
		m.err = err
		return
	case svc == nil:
		return
	}
	req := &informerhubv1.WatchManyRequest{ResumeToken: m.token}
	for _, w := range m.watches {
		wr := &informerhubv1.WatchRequest{Selector: w.Selector.proto(), Fields: w.Options.Fields,
			IncludePrevious: w.Options.IncludePrevious, SendInitialEvents: w.Options.SendInitialEvents}
		if !m.tokenFromHub {
			// Once the hub has issued a token, it holds every watch's
			// position: a watch's own token would win over it.
			wr.ResumeToken = w.Options.ResumeToken
		}
		req.Watches = append(req.Watches, wr)
	}
	ctx, cancel := context.WithCancel(m.ctx)
	stream, err := svc.WatchMany(ctx, req)
	if err == nil {
		// The hub sends the headers once the stream is established,
		// before any event: quiet watches have reconnected too.
		var md map[string][]string
		if md, err = stream.Header(); err == nil && md != nil {
			m.established(m.log())
		}
		if tokens := md["resume-token"]; !m.tokenFromHub && len(tokens) > 0 && tokens[0] != "" {
			// The token of the stream's start, so that a reconnection
			// before the first event loses nothing.
			m.token, m.tokenFromHub = tokens[0], true
		}
	}
	m.endpoint = endpoint
	if err != nil {
		cancel()
		m.streamFailed(err)
		return
	}
	m.stream, m.streamCancel = stream, cancel
}

// streamFailed decides what an error of the stream means for the watches.
func (m *ManyWatcher) streamFailed(err error) {
	if m.streamCancel != nil {
		m.streamCancel()
	}
	m.stream, m.streamCancel = nil, nil
	if m.ctx.Err() != nil {
		m.err = m.ctx.Err()
		return
	}
	if errors.Is(err, io.EOF) {
		err = status.Error(codes.Unavailable, "the hub ended the stream")
	}
	switch recoveryOf(err) {
	case resync, fail:
		m.err = err
	default:
		m.failed(err, m.endpoint, m.log())
	}
}

// WatchIndex returns the index of the watch of a WatchMany that err
// concerns (its ErrorInfo metadata "index"), and whether it concerns one.
func WatchIndex(err error) (int, bool) {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(interface{ GetMetadata() map[string]string }); ok {
			if s, ok := info.GetMetadata()["index"]; ok {
				i, err := strconv.Atoi(s)
				return i, err == nil
			}
		}
	}
	return 0, false
}
