package checker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// Options describe the subscription a transcript is of.
type Options struct {
	// Namespace, LabelSelector and FieldSelector are the subscription's
	// selector. Field selectors may use metadata.name and metadata.namespace.
	Namespace, LabelSelector, FieldSelector string
	// FromResourceVersion is where the first segment starts when it has no
	// initial events: the transcript must hold exactly the changes after
	// it. Without it, the first segment is taken to start right before its
	// first event. Ignored with InitialEvents.
	FromResourceVersion string
	// InitialEvents tells that the first segment begins with initial events.
	// (Any segment with an initial-events-end bookmark does.)
	InitialEvents bool
	// Relisted allows the subscriber to receive a relist's true differences
	// instead of every change, as when the hub had to relist (etcd
	// compaction, 410 Gone). Then an object's history may skip versions,
	// but every event must still be one of its states in the reference, and
	// none may be a phantom. Without it, an event marked FromRelist is a
	// violation: the stream had no relist to mark.
	Relisted bool

	// Match, when set, must select an object too: what the checker does
	// not evaluate itself, computed by the test independently of the hub
	// (the field selector, which the checker evaluates only on
	// metadata.name and metadata.namespace; a shard's hash; a filter). It
	// reports whether the object is selected, and whether that is because
	// a filter could not decide on it (then the hub sends it marked with a
	// filter_error).
	Match func(Event) (selected, undecided bool)
	// ShardSelector is the subscription's, for CheckState's LIST: an API
	// server with ShardedListAndWatch evaluates it there. Match must
	// evaluate it for Check.
	ShardSelector string
	// Project, when set, is the subscription's projection of an object, a
	// canonical JSON (see Canonical) in and out: the events carry it, and a
	// MODIFIED that leaves it the same is not sent.
	Project func(object string) (string, error)
	// IncludePrevious: a MODIFIED carries the object's state before it.
	IncludePrevious bool
}

// Check validates a transcript against the reference, up to the last event
// it holds, and returns every violation found, joined. The reference must
// have recorded that far: WaitFor the transcript's last resourceVersion
// first. The transcript should end at a consistent point (in Relisted mode,
// not inside a relist's differences), as Check compares the state its
// events build with the reference's.
func Check(ref *Reference, tr *Transcript, opts Options) error {
	sel, err := newSelector(opts)
	if err != nil {
		return err
	}
	if ref.namespace != "" && ref.namespace != opts.Namespace {
		return fmt.Errorf("the reference records namespace %q only, the subscription is of %q", ref.namespace, opts.Namespace)
	}
	segs := tr.snapshot()
	changes, progress := ref.history()
	if end := reach(segs, opts); end > progress {
		return fmt.Errorf("the transcript reaches resourceVersion %d, the reference only %d (WaitFor it first; reference error: %v)",
			end, progress, ref.Err())
	}
	c := &checker{opts: opts, verify: true, stateAt: func(v uint64) (map[objKey]Event, error) {
		if v < ref.start {
			return nil, fmt.Errorf("resourceVersion %d is older than the reference's LIST at %d: the test started the reference too late",
				v, ref.start)
		}
		state := ref.stateAt(changes, v)
		for k, e := range state {
			selected, undecided := sel.matches(e)
			if !selected {
				delete(state, k)
				continue
			}
			if e.Object, err = sel.project(e.Object); err != nil {
				return nil, err
			}
			e.Undecided = undecided
			state[k] = e
		}
		return state, nil
	}}
	if opts.Relisted {
		c.states = make(map[stateKey]string)
		for _, e := range slices.Concat(ref.initial, changes) {
			if c.states[stateKey{keyOf(e), e.UID, e.ResourceVersion}], err = sel.project(e.Object); err != nil {
				return err
			}
		}
	} else if c.want, err = expected(ref, changes, sel); err != nil {
		return err
	}
	end, err := c.replay(segs)
	if err == nil && end.state != nil && !end.initial {
		var want map[objKey]Event
		if want, err = c.stateAt(end.rv); err == nil {
			// With a projection, the subscriber's state may be older
			// than the reference's where nothing it keeps changed.
			for _, d := range diffStates(end.state, want, false, opts.Project != nil) {
				c.errs = append(c.errs, fmt.Errorf("final state at resourceVersion %d: %s", end.rv, d))
			}
		}
	}
	return errors.Join(append(c.errs, err)...)
}

// CheckState compares the state the transcript's events build with a LIST
// at the transcript's last resourceVersion (resourceVersionMatch=Exact, all
// pages, with the subscription's selector). Without initial events, the
// state the transcript starts from is LISTed likewise.
func CheckState(ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource, tr *Transcript, opts Options) error {
	ri := client.Resource(gvr).Namespace(opts.Namespace)
	c := &checker{opts: opts, stateAt: func(v uint64) (map[objKey]Event, error) {
		items, _, err := list(ctx, ri, metav1.ListOptions{LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector,
			ShardSelector:   opts.ShardSelector,
			ResourceVersion: strconv.FormatUint(v, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if err != nil {
			return nil, fmt.Errorf("LIST at resourceVersion %d: %w", v, err)
		}
		state := make(map[objKey]Event, len(items))
		for _, e := range items {
			state[keyOf(e)] = e
		}
		return state, nil
	}}
	end, err := c.replay(tr.snapshot())
	switch {
	case err != nil:
		return err
	case end.state == nil:
		return errors.New("the transcript holds no event to start from")
	case end.initial:
		return errors.New("the transcript ends inside initial events")
	}
	want, err := c.stateAt(end.rv)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range diffStates(end.state, want, false, false) {
		errs = append(errs, fmt.Errorf("state at resourceVersion %d, against the API server's: %s", end.rv, d))
	}
	return errors.Join(errs...)
}

type selector struct {
	namespace string
	labels    labels.Selector
	fields    fields.Selector
	opts      Options
}

func newSelector(opts Options) (selector, error) {
	l, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return selector{}, err
	}
	f, err := fields.ParseSelector(opts.FieldSelector)
	return selector{opts.Namespace, l, f, opts}, err
}

// matches says whether the subscription selects e, and whether only
// because its filter could not decide (see Options.Match).
func (s selector) matches(e Event) (selected, undecided bool) {
	if s.namespace != "" && e.Namespace != s.namespace || !s.labels.Matches(labels.Set(e.Labels)) {
		return false, false
	}
	if s.opts.Match != nil {
		return s.opts.Match(e)
	}
	return s.fields.Matches(fields.Set{"metadata.name": e.Name, "metadata.namespace": e.Namespace}), false
}

// project is the subscription's projection of a canonical object.
func (s selector) project(object string) (string, error) {
	if s.opts.Project == nil || object == "" {
		return object, nil
	}
	return s.opts.Project(object)
}

// expected is what a watch with sel delivers of changes, the way the
// Kubernetes watch cache filters: an object that starts matching arrives
// as ADDED, one that stops matching as DELETED in its last matching state
// with the change's resourceVersion. With a projection, objects are
// projected, and a MODIFIED that leaves the projection the same is not
// sent; with previous states, a MODIFIED carries the state before it.
func expected(ref *Reference, changes []Event, sel selector) ([]Event, error) {
	state := ref.stateAt(nil, ref.start)
	var want []Event
	for _, ch := range changes {
		prev, had := state[keyOf(ch)]
		apply(state, ch)
		var was, wasUndecided, is, isUndecided bool
		if had {
			was, wasUndecided = sel.matches(prev)
		}
		if ch.Type != Deleted {
			is, isUndecided = sel.matches(ch)
		}
		e := ch
		switch {
		case is && !was:
			e.Type = Added
		case is:
			e.Type = Modified
		case was && ch.Type == Deleted:
		case was:
			e = prev
			e.Type, e.ResourceVersion = Deleted, ch.ResourceVersion
			e.Object = withResourceVersion(prev.Object, ch.ResourceVersion)
		default:
			continue
		}
		// The reason an event is marked is that of a state that made it.
		e.Undecided = is && isUndecided || was && wasUndecided
		var err error
		if e.Object, err = sel.project(e.Object); err != nil {
			return nil, err
		}
		if e.Type == Modified && (sel.opts.Project != nil || sel.opts.IncludePrevious) {
			previous, err := sel.project(prev.Object)
			if err != nil {
				return nil, err
			}
			// Its own version aside: the projection keeps it, and it
			// always changes.
			if withResourceVersion(previous, "") == withResourceVersion(e.Object, "") {
				continue // nothing the subscriber asked for changed
			}
			if sel.opts.IncludePrevious {
				e.Previous = previous
			}
		}
		want = append(want, e)
	}
	return want, nil
}

// reach is the highest resourceVersion a check of segs looks at.
func reach(segs []segment, opts Options) uint64 {
	v := rv(opts.FromResourceVersion)
	for _, s := range segs {
		for _, e := range s.events {
			v = max(v, rv(e.ResourceVersion))
		}
	}
	return v
}

type checker struct {
	opts    Options
	verify  bool                                     // find violations, rather than only build the state
	stateAt func(v uint64) (map[objKey]Event, error) // the selected objects at v
	want    []Event                                  // exact mode: every change the subscriber must get
	states  map[stateKey]string                      // relisted mode: the object of every state in the reference
	seg     int                                      // the segment being replayed
	errs    []error
}

type stateKey struct {
	objKey
	uid, rv string
}

// pos is the subscriber's view at one point of its transcript.
type pos struct {
	state   map[objKey]Event  // the objects it has; nil while unknown
	rv      uint64            // the highest resourceVersion it received
	next    int               // exact mode: the index in want of the change it must get next
	initial bool              // it is inside initial events
	seen    map[string]uint64 // the last resourceVersion it received of each object, by UID
}

func (p *pos) clone() *pos {
	q := *p
	q.state, q.seen = maps.Clone(p.state), maps.Clone(p.seen)
	return &q
}

func (c *checker) errorf(i int, format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("segment %d, event %d: %s", c.seg, i, fmt.Sprintf(format, args...)))
}

// replay walks the transcript as the subscriber lived it: a segment opened
// with a token goes on from the position where that token was received.
// It returns the position at the end; an error means the check cannot go on.
func (c *checker) replay(segs []segment) (*pos, error) {
	resumed := make(map[string]bool) // the tokens segments resume from
	for _, s := range segs[min(1, len(segs)):] {
		resumed[s.token] = s.token != ""
	}
	saved := make(map[string]*pos) // the position right after each of them
	p, i := &pos{}, 0
	for k, s := range segs {
		c.seg = k
		var err error
		if p, err = c.begin(segs, k, i, saved); err != nil {
			return nil, fmt.Errorf("segment %d: %w", k, err)
		}
		if resumed[s.token] && saved[s.token] == nil {
			saved[s.token] = p.clone() // a token of a stream's start, from its headers
		}
		for _, e := range s.events {
			if err := c.step(i, e, p); err != nil {
				return nil, fmt.Errorf("segment %d, event %d: %w", k, i, err)
			}
			if resumed[e.ResumeToken] {
				saved[e.ResumeToken] = p.clone()
			}
			i++
		}
	}
	return p, nil
}

// begin returns the position segment k starts from; i indexes its first event.
func (c *checker) begin(segs []segment, k, i int, saved map[string]*pos) (*pos, error) {
	s := segs[k]
	initial := slices.ContainsFunc(s.events, func(e Event) bool { return e.InitialEventsEnd }) || k == 0 && c.opts.InitialEvents
	if k > 0 && s.token != "" {
		p := saved[s.token]
		switch {
		case p == nil && c.verify:
			c.errorf(i, "the stream resumed from a token the transcript had not received (the stream before ended with %v)", segs[k-1].err)
		case p != nil && p.state != nil && (p.initial || !initial):
			// Go on from the token. A token received inside initial events
			// continues them; otherwise, new initial events start afresh.
			return p.clone(), nil
		}
	}
	switch {
	case initial:
		return &pos{state: map[objKey]Event{}, initial: true, seen: map[string]uint64{}}, nil
	case k == 0 && c.opts.FromResourceVersion != "":
		v, err := parseRV(c.opts.FromResourceVersion)
		if err != nil {
			return nil, err
		}
		return c.at(v)
	case len(s.events) == 0:
		return &pos{}, nil
	}
	// A fresh stream starts "now", which the transcript does not record:
	// take it to be right before the stream's first event.
	v := rv(s.events[0].ResourceVersion)
	if s.events[0].Type != Bookmark {
		v--
	}
	return c.at(v)
}

// at is the position of a subscriber that has all the changes up to v.
func (c *checker) at(v uint64) (*pos, error) {
	state, err := c.stateAt(v)
	if err != nil {
		return nil, err
	}
	p := &pos{state: state, rv: v, next: c.after(v), seen: map[string]uint64{}}
	for _, e := range state {
		p.seen[e.UID] = rv(e.ResourceVersion)
	}
	return p, nil
}

// after is the index in want of the first change after v.
func (c *checker) after(v uint64) int {
	return sort.Search(len(c.want), func(j int) bool { return rv(c.want[j].ResourceVersion) > v })
}

func (c *checker) step(i int, e Event, p *pos) error {
	v := rv(e.ResourceVersion)
	switch {
	case e.Type == Bookmark:
		if c.verify && v < p.rv {
			c.errorf(i, "bookmark at %d is older than resourceVersion %d received before it", v, p.rv)
		}
		if c.verify && !p.initial && p.next < len(c.want) && rv(c.want[p.next].ResourceVersion) <= v {
			c.errorf(i, "bookmark at %d passes %s, which was not sent", v, describe(c.want[p.next]))
		}
		if e.InitialEventsEnd && !p.initial && c.verify {
			c.errorf(i, "initial-events-end bookmark after the initial events")
		}
		if e.InitialEventsEnd && p.initial {
			if c.verify {
				want, err := c.stateAt(v)
				if err != nil {
					return err
				}
				for _, d := range diffStates(p.state, want, true, false) {
					c.errorf(i, "initial events at resourceVersion %d: %s", v, d)
				}
			}
			p.initial, p.next = false, c.after(v)
		}
	case p.initial:
		if _, dup := p.state[keyOf(e)]; c.verify && (dup || e.Type != Added) {
			c.errorf(i, "got %s among the initial events, want a single ADDED per object", describe(e))
		}
		apply(p.state, e)
		p.seen[e.UID] = v
	default:
		if c.verify && c.opts.Relisted {
			c.checkRelisted(i, e, p)
		} else if c.verify {
			c.checkExact(i, e, p)
			if e.FromRelist {
				c.errorf(i, "got %s marked from_relist, in a stream with no relist", describe(e))
			}
		}
		apply(p.state, e)
		p.seen[e.UID] = v
	}
	p.rv = max(p.rv, v)
	return nil
}

// checkExact checks that e is the change p must get next.
func (c *checker) checkExact(i int, e Event, p *pos) {
	v := rv(e.ResourceVersion)
	j := sort.Search(len(c.want), func(j int) bool { return rv(c.want[j].ResourceVersion) >= v })
	if j == len(c.want) || c.want[j].ResourceVersion != e.ResourceVersion || keyOf(c.want[j]) != keyOf(e) {
		c.errorf(i, "got %s, which the reference does not have; want %s", describe(e), c.nextWant(p))
		return
	}
	switch {
	case j < p.next:
		c.errorf(i, "got %s again; want %s", describe(e), c.nextWant(p))
		return
	case j > p.next:
		c.errorf(i, "missing %d change(s) before %s, from %s", j-p.next, describe(e), describe(c.want[p.next]))
	}
	w := c.want[j]
	switch {
	case w.Type != e.Type || w.UID != e.UID || w.Object != e.Object:
		c.errorf(i, "got %s, want %s%s", describe(e), describe(w), objectDiff(w.Object, e.Object))
	case w.Previous != e.Previous:
		c.errorf(i, "got %s with a previous state unlike the reference's%s", describe(e), objectDiff(w.Previous, e.Previous))
	case w.Undecided != e.Undecided:
		c.errorf(i, "got %s marked undecided by the filter: %v, want %v", describe(e), e.Undecided, w.Undecided)
	}
	p.next = j + 1
}

func (c *checker) nextWant(p *pos) string {
	if p.next < len(c.want) {
		return describe(c.want[p.next])
	}
	return "no further change"
}

// checkRelisted checks that e is a true difference to what p has, and a
// state the object had. The object of a DELETED is not compared: it may be
// the last state that matched with a later version.
func (c *checker) checkRelisted(i int, e Event, p *pos) {
	have, ok := p.state[keyOf(e)]
	switch {
	case e.Type == Added && ok, e.Type != Added && ok && have.UID != e.UID:
		c.errorf(i, "got %s, but the subscriber has %s", describe(e), state(have))
		return
	case e.Type != Added && !ok:
		c.errorf(i, "got %s of an object the subscriber does not have", describe(e))
		return
	case e.Type == Modified && (have.ResourceVersion == e.ResourceVersion || have.Object == e.Object):
		c.errorf(i, "got %s, a phantom: the subscriber has that already", describe(e))
		return
	case e.Type == Modified && c.opts.IncludePrevious && e.Previous != have.Object:
		c.errorf(i, "got %s with a previous state unlike the subscriber's%s", describe(e), objectDiff(have.Object, e.Previous))
	}
	if last, ok := p.seen[e.UID]; ok && rv(e.ResourceVersion) <= last {
		c.errorf(i, "got %s after resourceVersion %d of the object", describe(e), last)
	}
	switch obj, ok := c.states[stateKey{keyOf(e), e.UID, objectRV(e)}]; {
	case !ok:
		c.errorf(i, "got %s, a state the reference never saw", describe(e))
	case e.Type != Deleted && obj != e.Object:
		c.errorf(i, "got %s, unlike the reference's%s", describe(e), objectDiff(obj, e.Object))
	}
}

// diffStates describes how the objects got differ from those wanted; with
// undecided, in the filter's marks too (those of initial events, which
// are the objects' own); with anyVersion, whatever their resourceVersions.
func diffStates(got, want map[objKey]Event, undecided, anyVersion bool) []string {
	var out []string
	for k, w := range want {
		g, ok := got[k]
		if ok && anyVersion {
			g.ResourceVersion, g.Object = w.ResourceVersion, withResourceVersion(g.Object, w.ResourceVersion)
		}
		switch {
		case !ok:
			out = append(out, "missing "+state(w))
		case g.UID != w.UID || g.ResourceVersion != w.ResourceVersion:
			out = append(out, fmt.Sprintf("has %s, want %s", state(g), state(w)))
		case g.Object != w.Object:
			out = append(out, state(g)+objectDiff(w.Object, g.Object))
		case undecided && g.Undecided != w.Undecided:
			out = append(out, fmt.Sprintf("%s marked undecided by the filter: %v, want %v", state(g), g.Undecided, w.Undecided))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			out = append(out, "unexpected "+state(g))
		}
	}
	slices.Sort(out)
	return out
}

func objectDiff(want, got string) string {
	if want == got {
		return ""
	}
	var w, g any
	_, _ = json.Unmarshal([]byte(want), &w), json.Unmarshal([]byte(got), &g)
	return "; object (-want +got):\n" + cmp.Diff(w, g)
}

// State returns the objects the subscription of opts selects at
// resourceVersion, as the reference knows them (projected, and marked
// undecided, as opts says): what a stream holds there, or what a Count
// counts. The reference must have recorded that far.
func (r *Reference) State(resourceVersion string, opts Options) ([]Event, error) {
	v, err := parseRV(resourceVersion)
	if err != nil {
		return nil, err
	}
	sel, err := newSelector(opts)
	if err != nil {
		return nil, err
	}
	changes, progress := r.history()
	switch {
	case v < r.start:
		return nil, fmt.Errorf("resourceVersion %d is older than the reference's LIST at %d", v, r.start)
	case v > progress:
		return nil, fmt.Errorf("the reference has recorded up to resourceVersion %d, not %d (WaitFor it first)", progress, v)
	}
	var out []Event
	for _, e := range r.stateAt(changes, v) {
		selected, undecided := sel.matches(e)
		if !selected {
			continue
		}
		if e.Object, err = sel.project(e.Object); err != nil {
			return nil, err
		}
		e.Undecided = undecided
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Event) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	return out, nil
}
