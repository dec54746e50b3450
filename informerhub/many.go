package informerhub

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/informerhub/informerhub/informerhub/internal/feed"
	"github.com/informerhub/informerhub/informerhub/internal/stream"
	"github.com/informerhub/informerhub/informerhub/internal/token"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// WatchManyRequest asks for several subscriptions on one stream.
type WatchManyRequest struct {
	// Watches are the subscriptions, each as Watch takes it.
	Watches []WatchRequest
	// ResumeToken, a ManyEvent's, resumes every watch it holds exactly
	// after that event (see matchComposite).
	ResumeToken string
}

// FieldWatches names WatchManyRequest.Watches, for RequestError.Field.
const FieldWatches = "watches"

// WatchError is the error of one watch of a WatchMany: the Index-th of its
// request.
type WatchError struct {
	Index int
	Err   error
}

func (e *WatchError) Error() string { return fmt.Sprintf("watch %d: %v", e.Index, e.Err) }
func (e *WatchError) Unwrap() error { return e.Err }

// WatchErrorAt returns err as the error of the index-th watch of a
// WatchMany: a *WatchError whose *RequestError, if it holds one, names its
// field within the request ("watches[2].selector.namespace").
func WatchErrorAt(index int, err error) error {
	if req, ok := err.(*RequestError); ok {
		named := *req
		named.Field = "watches[" + strconv.Itoa(index) + "]." + req.Field
		err = &named
	}
	return &WatchError{Index: index, Err: err}
}

// ManyEvent is one response of a ManySubscription.
type ManyEvent struct {
	// Index is the watch the event belongs to.
	Index int
	// Event is the watch's event, shared as Subscription.Next's are: never
	// modify it. Its ResumeToken resumes that watch alone.
	Event *Event
	// ResumeToken resumes every watch right after this event.
	ResumeToken string
	// InitialEventsEnd is set on the event that ends the last watch's
	// initial events.
	InitialEventsEnd bool
}

// ManySubscription is several subscriptions on one stream: Next returns the
// events of every watch, each watch's in its own order. First the initial
// events of the watches that send them, in the order of the watches, and
// nothing else meanwhile; then every watch's events as they come.
//
// Each event returned brings a composite token (see composite) that resumes
// every watch after it. Next must be called from one goroutine at a time;
// Close may be called from any.
type ManySubscription struct {
	subs   []*Subscription
	header string // the composite's, fixed for the stream
	// Owned by the goroutine calling Next.
	tokens []string // each watch's token, as of the last event returned
	// initial holds the watches whose initial events are still to be
	// returned, in order; live is set once they have been.
	initial []int
	live    bool
	// lastToken is the composite of the last event returned, or the start.
	lastToken atomic.Pointer[string]

	// The live stage: one goroutine per watch calls its Next and hands
	// the events over on items, until stop ends them (Close).
	items   chan manyItem
	liveCtx context.Context
	stop    context.CancelFunc
	fanIn   sync.WaitGroup
	// mu guards closed, and the start of the fan-in goroutines against
	// Close's wait for them.
	mu     sync.Mutex
	closed bool
	failed feed.Ending // ended by the first watch that fails
	// failure is the first watch's failure, a *WatchError; set before
	// failed ends.
	failure   error
	failOnce  sync.Once
	closeOnce sync.Once
}

type manyItem struct {
	index int
	ev    *Event
}

// WatchMany starts a subscription of each of req's watches, each as Watch
// would, from req.ResumeToken's tokens for the watches it holds. An error
// that concerns one watch is a *WatchError.
func (h *Hub) WatchMany(ctx context.Context, req WatchManyRequest) (*ManySubscription, error) {
	if len(req.Watches) == 0 || len(req.Watches) > token.MaxCompositeWatches {
		return nil, &RequestError{Field: FieldWatches, Err: ErrInvalidRequest,
			Reason: fmt.Sprintf("give between 1 and %d watches, not %d", token.MaxCompositeWatches, len(req.Watches))}
	}
	var comp *token.Composite
	if req.ResumeToken != "" {
		var err error
		if comp, err = token.DecodeComposite(req.ResumeToken); err != nil {
			return nil, &RequestError{Field: FieldResumeToken, Err: ErrInvalidToken, Reason: err.Error()}
		}
	}
	infos := make([]upstream.ResourceInfo, len(req.Watches))
	params := make([]*stream.Params, len(req.Watches))
	identities := make([]uint64, len(req.Watches))
	for i, w := range req.Watches {
		var err error
		if infos[i], params[i], err = h.watchParams(ctx, w); err != nil {
			return nil, WatchErrorAt(i, err)
		}
		identities[i] = identityOf(infos[i], params[i])
		params[i].LazyReplay = true
	}
	entries := matchComposite(comp, identities)
	for i, w := range req.Watches {
		var err error
		switch {
		case w.ResumeToken != "":
			// The watch's own token wins: how a client restarts one
			// watch of many (from a Snapshot's token, say).
			params[i].Token, err = checkToken(w.ResumeToken, infos[i], params[i].Selector)
			if err != nil {
				err = WatchErrorAt(i, err)
			}
		case entries[i] >= 0:
			params[i].Token, err = checkToken(comp.Tokens[entries[i]], infos[i], params[i].Selector)
			if err != nil {
				// The composite's, not the watch's field.
				err = &WatchError{Index: i, Err: err}
			}
			// The token says whether initial events are under way;
			// resuming goes on exactly after it either way.
			params[i].SendInitialEvents = false
		}
		if err != nil {
			return nil, err
		}
	}
	m := &ManySubscription{
		subs:   make([]*Subscription, 0, len(req.Watches)),
		header: token.CompositeHeader(identities),
		tokens: make([]string, len(req.Watches)),
		items:  make(chan manyItem),
	}
	m.liveCtx, m.stop = context.WithCancel(context.Background())
	for i := range req.Watches {
		s, err := h.subscribe(ctx, infos[i], params[i])
		if err != nil {
			m.Close()
			return nil, WatchErrorAt(i, err)
		}
		m.subs = append(m.subs, s)
		m.tokens[i] = s.ResumeToken()
		if params[i].SendInitialEvents || (params[i].Token != nil && params[i].Token.Initial) {
			m.initial = append(m.initial, i)
		}
	}
	start := token.EncodeComposite(m.header, m.tokens)
	m.lastToken.Store(&start)
	if len(m.initial) == 0 {
		m.startLive()
	}
	return m, nil
}

// identityOf identifies a watch by which events it sends: its resource
// type, its selection by canonical key (so that equivalent selectors, "a=b"
// and "a==b", are one), and its projection (which drops the changes of
// what it leaves out). Watches of one identity send the same events, so
// that each one's token resumes any other exactly. The form of those
// events (previous states, object format) is not part of it.
func identityOf(info upstream.ResourceInfo, p *stream.Params) uint64 {
	h := fnv.New64a()
	h.Write([]byte(upstream.FormatResource(info.Resource)))
	h.Write([]byte{0})
	h.Write([]byte(p.Selector.Key()))
	h.Write([]byte{0})
	if p.Projection != nil {
		h.Write([]byte(p.Projection.Key()))
	}
	return h.Sum64()
}

// matchComposite returns, for each watch, the index of the composite's
// entry that resumes it, or -1. The n-th watch of an identity takes the
// n-th entry of that identity: so a request may drop, add or change
// watches, and resume the rest.
func matchComposite(c *token.Composite, identities []uint64) []int {
	entries := make([]int, len(identities))
	for i := range entries {
		entries[i] = -1
	}
	if c == nil {
		return entries
	}
	taken := make([]bool, len(c.Identities))
	for i, id := range identities {
		for j, cid := range c.Identities {
			if cid == id && !taken[j] {
				entries[i], taken[j] = j, true
				break
			}
		}
	}
	return entries
}

// Next returns the next event of any watch. It blocks until there is one,
// the context ends, or a watch fails: then it returns a *WatchError with
// that watch's error, and the same on every later call.
func (m *ManySubscription) Next(ctx context.Context) (*ManyEvent, error) {
	if !m.live {
		return m.nextInitial(ctx)
	}
	select {
	case it := <-m.items:
		return m.returned(it.index, it.ev, false), nil
	case <-m.failed.Done():
		return nil, m.failure
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// nextInitial returns the next initial event, of the first watch still
// sending them; past the last one's end, it starts the live stage.
func (m *ManySubscription) nextInitial(ctx context.Context) (*ManyEvent, error) {
	i := m.initial[0]
	ev, err := m.subs[i].Next(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err() // the caller's, not the watch's: it may call again
		}
		m.fail(i, err)
		return nil, m.failure
	}
	var end bool
	if ev.InitialEventsEnd {
		m.initial = m.initial[1:]
		end = len(m.initial) == 0
	}
	if end {
		m.startLive()
	}
	return m.returned(i, ev, end), nil
}

// returned records ev, of the index-th watch, as returned.
func (m *ManySubscription) returned(index int, ev *Event, initialEnd bool) *ManyEvent {
	m.tokens[index] = ev.ResumeToken
	me := &ManyEvent{Index: index, Event: ev, ResumeToken: token.EncodeComposite(m.header, m.tokens), InitialEventsEnd: initialEnd}
	m.lastToken.Store(&me.ResumeToken)
	return me
}

// startLive starts a goroutine per watch that hands its events to Next.
func (m *ManySubscription) startLive() {
	m.live = true
	ctx := m.liveCtx
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	for i, s := range m.subs {
		m.fanIn.Add(1)
		go func() {
			defer m.fanIn.Done()
			for {
				ev, err := s.Next(ctx)
				if err != nil {
					if ctx.Err() == nil {
						m.fail(i, err)
					}
					return
				}
				select {
				case m.items <- manyItem{i, ev}:
				case <-s.Done(): // failed while Next's caller is away
					m.fail(i, s.Err())
					return
				case <-ctx.Done():
					return
				}
			}
		}()
	}
}

// fail records the index-th watch's failure, unless one came first.
func (m *ManySubscription) fail(index int, err error) {
	m.failOnce.Do(func() {
		m.failure = &WatchError{Index: index, Err: err}
		m.failed.Close()
	})
}

// Done is closed when a watch can deliver no more (see Subscription.Done);
// Next then returns Err.
func (m *ManySubscription) Done() <-chan struct{} { return m.failed.Done() }

// AfterFail arranges for f to run once Done is closed, as
// Subscription.AfterFail does.
func (m *ManySubscription) AfterFail(f func()) (stop func()) { return m.failed.After(f) }

// Err returns the first watch's failure, a *WatchError, once Done is
// closed; otherwise nil.
func (m *ManySubscription) Err() error {
	if !m.failed.IsEnded() {
		return nil
	}
	return m.failure
}

// ResumeToken returns the composite token of the last event Next returned,
// or the one the subscription started from. It may be called from any
// goroutine.
func (m *ManySubscription) ResumeToken() string { return *m.lastToken.Load() }

// Close ends every watch and waits for the goroutines of the live stage.
func (m *ManySubscription) Close() {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		m.stop()
		for _, s := range m.subs {
			s.Close()
		}
		m.fanIn.Wait()
	})
}
