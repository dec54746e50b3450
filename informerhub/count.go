package informerhub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/projection"
	"github.com/informerhub/informerhub/internal/jsonscan"
)

// Counting: how many objects a selector selects, per group, kept up to
// date from each change. This file holds the request, its grouping, the
// callers' side (CountSubscription) and the hub's registry of counters;
// counter.go holds a counter's goroutines.

// CountRequest asks for counts.
type CountRequest struct {
	// Selector chooses what to count, as a Watch's does. An object its
	// filter cannot decide on counts as selected, as a Watch sends it.
	Selector Selector
	// GroupBy says how to group the objects: "" (the total only),
	// "namespace", "label:<key>" (by the value of that label), or a path
	// as WatchRequest.Fields takes it, e.g. "status.phase" (a path that
	// reads "namespace" or starts with "label:" is written in brackets:
	// ["namespace"]). An object without the label or path, or with null
	// there, groups as "". A path's value groups as the string it is, or
	// else as its compact JSON (a number as the API server wrote it, an
	// object with its keys sorted); a path through a list gives the list of
	// the values of the elements that have one.
	GroupBy string
	// Owner names who asks, as WatchRequest.Owner. A request that starts a
	// counter (none runs for its selector and grouping) subscribes as its
	// owner, so the counter's filter counts within its owner's limits
	// (Config.MaxFiltersPerOwner) for as long as the counter runs, whoever
	// else shares it.
	Owner string
}

// Counts is the counts at one point in time. It is shared by every caller
// of its counter, and by transports that send it: never modify one.
type Counts struct {
	// Groups counts the selected objects per group value; nil when
	// GroupBy is "". Groups at zero are left out.
	Groups map[string]uint64
	// Total counts all the selected objects.
	Total uint64
	// ResourceVersion is the Kubernetes resourceVersion of the state the
	// counts describe.
	ResourceVersion string

	encodings [2]struct {
		once    sync.Once
		encoded Encoded
		err     error
	}
}

// Encoded returns encode(c) for a transport's form of it (0 or 1: say,
// binary and JSON), computed once per form however many streams send c:
// a large map is encoded once per publication, not once per caller.
func (c *Counts) Encoded(form int, encode func(*Counts) (Encoded, error)) (Encoded, error) {
	e := &c.encodings[form]
	e.once.Do(func() { e.encoded, e.err = encode(c) })
	return e.encoded, e.err
}

// CheckGroupBy checks a CountRequest's GroupBy: a *RequestError on
// FieldGroupBy when it is none of "", "namespace", "label:<key>" with a
// valid label key, and a path that parses. It reveals nothing about the
// cluster, so a transport runs it before asking who may do what, as
// Hub.CheckSyntax. Count checks it again.
func CheckGroupBy(groupBy string) error {
	_, err := parseGroupBy(groupBy)
	return err
}

// groupBy is a parsed CountRequest.GroupBy.
type groupBy struct {
	// key identifies the grouping among a selector's counters: "",
	// "namespace", "label:<key>", or "path:" and the canonical path.
	key string
	// path is where an object's group value is; nil: no groups, the total
	// only.
	path []string
	// previous is set when a MODIFIED may change an object's group: the
	// counter then needs the state before the change.
	previous bool
}

func parseGroupBy(s string) (*groupBy, error) {
	switch {
	case s == "":
		return &groupBy{}, nil
	case s == "namespace":
		// An object's namespace never changes: no previous state.
		return &groupBy{key: s, path: []string{"metadata", "namespace"}}, nil
	case strings.HasPrefix(s, "label:"):
		key := strings.TrimPrefix(s, "label:")
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			return nil, &RequestError{Field: FieldGroupBy, Err: ErrInvalidRequest,
				Reason: fmt.Sprintf("%q is not a valid label key: %s", selection.Truncate(key), strings.Join(errs, "; "))}
		}
		path := []string{"metadata", "labels", key}
		return &groupBy{key: s, path: path, previous: true}, nil
	}
	path, err := projection.ParsePath(s)
	if err != nil {
		return nil, &RequestError{Field: FieldGroupBy, Err: ErrInvalidRequest,
			Reason: fmt.Sprintf(`%q is neither "", "namespace", "label:<key>" nor a path: %v`, selection.Truncate(s), err)}
	}
	canonical := projection.FormatPath(path)
	return &groupBy{key: "path:" + canonical, path: path, previous: true}, nil
}

// group returns the group of an object, from its JSON (projected by
// fields): "" without groups, or when the object has nothing (or null) at
// path.
func (g *groupBy) group(obj string) (string, error) {
	if g.path == nil {
		return "", nil
	}
	// Most groups are strings, numbers or booleans reached through
	// objects: read them where they are, without decoding the object, and
	// without reading past them (metadata.labels comes before the much
	// larger managedFields).
	b := state.UnsafeBytes(obj)
	start := jsonscan.SkipSpace(b, 0)
	for _, name := range g.path {
		if start >= len(b) {
			return g.decoded(obj) // malformed: decoding tells
		}
		switch b[start] {
		case '{':
			at, found, err := jsonscan.MemberValue(b, start, name)
			switch {
			case err != nil:
				return g.decoded(obj)
			case !found:
				return "", nil
			}
			start = at
		case '[':
			return g.decoded(obj) // through a list
		default:
			return "", nil // a scalar where the path goes on
		}
	}
	if start >= len(b) {
		return g.decoded(obj)
	}
	switch b[start] {
	case 'n':
		return "", nil // null
	case '{', '[':
		return g.decoded(obj)
	}
	end, err := jsonscan.ValueEnd(b, start)
	if err != nil {
		return g.decoded(obj)
	}
	if value, ok := jsonscan.ScalarString(b[start:end]); ok {
		return value, nil
	}
	return g.decoded(obj)
}

// decoded is group the slow way: the object decoded, the value at path
// found in it and, unless a string, encoded again.
func (g *groupBy) decoded(obj string) (string, error) {
	dec := json.NewDecoder(strings.NewReader(obj))
	dec.UseNumber() // numbers as the API server wrote them
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	value, ok := valueAt(v, g.path)
	if !ok {
		return "", nil
	}
	if s, ok := value.(string); ok {
		return s, nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(value); err != nil { // objects with sorted keys
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// valueAt returns the value at path of a decoded JSON value, false when
// there is none (or null). Through a list, the path applies to each
// element, as in a projection: the value is the list of the elements'
// values, without the elements that have none.
func valueAt(v any, path []string) (any, bool) {
	if v == nil {
		return nil, false
	}
	if len(path) == 0 {
		return v, true
	}
	switch v := v.(type) {
	case map[string]any:
		child, ok := v[path[0]]
		if !ok {
			return nil, false
		}
		return valueAt(child, path[1:])
	case []any:
		values := make([]any, 0, len(v))
		for _, e := range v {
			if value, ok := valueAt(e, path); ok {
				values = append(values, value)
			}
		}
		return values, true
	}
	return nil, false // a scalar where the path goes on
}

// Count starts counting the objects req.Selector selects, per group: its
// CountSubscription's Next returns the current counts first, then newer
// counts whenever they change, at most once per Config.CountInterval.
// Close it when done.
//
// Callers with the same resource type, selection (selectors that select
// the same, however written) and grouping share one counter, and every
// Counts it publishes. A counter is one subscription of the resource
// type's feed, as a Watch with initial events (and the previous state,
// when a change may move an object between groups): its initial events
// make the first counts, and each change delivered after them adds an
// object to its group, takes one out of its group, or moves one between
// groups, its group value read in place from the object's JSON. The feed
// matches and queues for it as for any subscriber, and builds its events
// without encoding them; nothing is listed again. The counter stops when
// its last caller closes.
//
// A counter that falls behind the changes further than the history holds
// counts afresh from the state, and goes on (see counter): callers see
// its next counts, of a later state, and no end. A counter that can go no
// further (its informer stopped, a change took it past its limits, the
// hub closed) ends all its callers: Next returns why. The next Count
// starts a fresh counter.
func (h *Hub) Count(ctx context.Context, req CountRequest) (*CountSubscription, error) {
	g, err := parseGroupBy(req.GroupBy)
	if err != nil {
		return nil, err
	}
	info, sel, err := h.prepare(ctx, req.Selector)
	if err != nil {
		return nil, err
	}
	key := countKey{resource: info.Resource, selector: sel.Key(), groupBy: g.key}
	for {
		c, first, err := h.counts.take(key)
		if err != nil {
			return nil, err
		}
		if first {
			c.start(ctx, h, req, g)
		}
		select {
		case <-c.started:
		case <-ctx.Done():
			h.counts.release(c)
			return nil, ctx.Err()
		}
		if c.startErr == nil {
			return &CountSubscription{c: c, hub: h, closed: make(chan struct{})}, nil
		}
		h.counts.release(c)
		if first {
			return nil, c.startErr
		}
		// Another caller's start failed, perhaps for its own reasons (its
		// context, its owner's limits): start one of this caller's own.
	}
}

// CountSubscription is one caller's share of a counter. Next must be
// called from one goroutine at a time; Close may be called from any.
type CountSubscription struct {
	c      *counter
	hub    *Hub
	closed chan struct{}
	// last is the counts Next returned last; owned by Next's goroutine.
	last      *Counts
	closeOnce sync.Once
}

// Next returns the current counts the first time, then the next counts
// newer than those it returned: a caller slower than the counts change
// skips to the newest. It blocks until there are any, the context ends,
// the subscription is closed (ErrSubscriptionClosed), or the counter fails
// (see Hub.Count). A failed subscription returns the same error on every
// later call.
func (s *CountSubscription) Next(ctx context.Context) (*Counts, error) {
	for {
		select {
		case <-s.closed:
			return nil, ErrSubscriptionClosed
		default:
		}
		counts, changed, err := s.c.current()
		if err != nil {
			return nil, err
		}
		if counts != nil && counts != s.last {
			s.last = counts
			return counts, nil
		}
		select {
		case <-changed:
		case <-s.closed:
			return nil, ErrSubscriptionClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Done is closed when the counter can count no more; Next then returns
// Err. A caller blocked elsewhere (in a send to a client that stopped
// reading) can watch Done to give up on that client.
func (s *CountSubscription) Done() <-chan struct{} { return s.c.failed.Done() }

// AfterFail arranges for f to run once Done is closed, as
// Subscription.AfterFail does.
func (s *CountSubscription) AfterFail(f func()) (stop func()) { return s.c.failed.After(f) }

// Err returns why the counter failed, once Done is closed; otherwise nil.
func (s *CountSubscription) Err() error {
	if !s.c.failed.IsEnded() {
		return nil
	}
	return s.c.err
}

// Close ends the subscription. The last of a counter's subscriptions to
// close stops the counter, and returns once its goroutines have ended.
func (s *CountSubscription) Close() {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.hub.counts.release(s.c)
	})
}

// countKey identifies what a counter counts.
type countKey struct {
	resource schema.GroupVersionResource
	selector string // selector.key
	groupBy  string // groupBy.key
}

// counts is the hub's running counters, one per countKey, each shared by
// the callers that count the same, as feeds share informers: the first
// caller starts it, the last one to leave stops it. A counter that failed
// is removed at once, so that the next caller starts a fresh one.
type counts struct {
	maxGroups int        // Config.MaxCountGroups
	mu        sync.Mutex // guards the fields below, and every counter's refs
	entries   map[countKey]*counter
	closed    bool
	// running runs the counters' goroutines, for Hub.Close to wait for.
	running sync.WaitGroup
}

func newCounts(maxGroups int) *counts {
	return &counts{maxGroups: maxGroups, entries: map[countKey]*counter{}}
}

// take returns the counter of key with one more reference, and whether
// it is new: its taker must start it.
func (cs *counts) take(key countKey) (c *counter, first bool, err error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		return nil, false, ErrClosed
	}
	if c = cs.entries[key]; c == nil {
		c, first = newCounter(key), true
		cs.entries[key] = c
	}
	c.refs++
	return c, first, nil
}

// release undoes a take. The last release of a counter stops it, and
// waits for its goroutines to end.
func (cs *counts) release(c *counter) {
	cs.mu.Lock()
	c.refs--
	last := c.refs == 0
	if last {
		cs.discardLocked(c)
		close(c.quit)
	}
	sub := c.sub
	cs.mu.Unlock()
	if last && sub != nil {
		sub.Close() // its Next returns: the counter's goroutines end
		<-c.done
	}
}

// run starts the goroutines of a counter whose subscription is open,
// unless the hub is closing; subscribe opens another (see counter.run).
func (cs *counts) run(c *counter, sub *Subscription, subscribe func(context.Context) (*Subscription, error), g *groupBy, interval time.Duration) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		return ErrClosed
	}
	c.sub = sub
	cs.running.Add(1)
	go func() {
		defer cs.running.Done()
		c.run(sub, subscribe, g, interval, cs)
	}()
	return nil
}

// replace makes sub the counter's subscription, the one its last release
// closes, and reports whether the counter still has callers: if not, the
// caller closes sub.
func (cs *counts) replace(c *counter, sub *Subscription) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c.refs == 0 {
		return false
	}
	c.sub = sub
	return true
}

// discard removes a counter that failed from the registry, if it is still
// there.
func (cs *counts) discard(c *counter) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.discardLocked(c)
}

func (cs *counts) discardLocked(c *counter) {
	if cs.entries[c.key] == c {
		delete(cs.entries, c.key)
	}
}

// close refuses every later take and start. The counters running end as
// their feeds stop; wait for them with running.
func (cs *counts) close() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.closed = true
}

// len counts the running counters.
func (cs *counts) len() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.entries)
}
