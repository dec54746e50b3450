package informerhub_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	. "github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

// TestTokensOfOtherFeedInstances forges tokens (export_test.go) to reach the
// cases a client cannot produce on demand: tokens of other feed instances at
// chosen positions.
func TestTokensOfOtherFeedInstances(t *testing.T) {
	c := hubtest.NewCluster(t)
	for i := range 3 {
		c.ConfigMaps().Add(hubtest.ConfigMap("ns", fmt.Sprint(i), nil, "")) // rv 1..3
	}
	h := New(Config{HistorySize: 4, Logger: slog.New(slog.DiscardHandler)}, c, c)
	defer h.Close()
	ctx := context.Background()
	sel := Selector{Resource: hubtest.ConfigMaps}
	live, err := h.Watch(ctx, WatchRequest{Selector: sel}) // the list is at rv 3
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	for i := range 6 {
		c.ConfigMaps().Modify(hubtest.ConfigMap("ns", "0", nil, fmt.Sprint(i))) // rv 4..9
		if _, err := live.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The history holds the records of rv 6..9; its floor is rv 5.

	other := uint64(12345) // an epoch no feed has
	tests := []struct {
		name    string
		rv      uint64
		offset  uint32
		wantErr error
		wantRVs []string // the first events after resuming
	}{
		{"inside the history", 7, 0, nil, []string{"8", "9"}},
		{"at the floor", 5, 0, nil, []string{"6", "7"}},
		{"below the floor: replayed from the API server", 4, 0, nil, []string{"5", "6", "7"}},
		{"inside another instance's relist", 7, 2, ErrTokenExpired, nil},
		{"ahead of the hub", 10, 0, ErrTokenAhead, nil},
		{"at the hub's position", 9, 0, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := ForgeToken("configmaps.v1", other, 0, tt.rv, tt.offset)
			s, err := h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: tok})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Watch: %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			defer s.Close()
			for _, want := range tt.wantRVs {
				ev, err := s.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if ev.ResourceVersion != want {
					t.Fatalf("event at rv %s, want %s", ev.ResourceVersion, want)
				}
			}
		})
	}
}

// TestHistoryOvertakesACatchingUpSubscriber: a subscriber catching up from
// the history, whose next records get evicted before it reads them,
// continues from the API server instead, and misses nothing.
func TestHistoryOvertakesACatchingUpSubscriber(t *testing.T) {
	fx := newResumeFixture(t, Config{HistorySize: 300})
	h, ctx, sel := fx.h, fx.ctx, fx.sel
	fx.add("ns", 290) // rv 2..291
	late, err := h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: fx.start})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	// It reads its first batch of the history (256 records); then 300
	// more changes push the rest of what it needs out of the history.
	if _, err := late.Next(ctx); err != nil {
		t.Fatal(err)
	}
	fx.add("ns2", 300) // rv 292..591
	for want := 3; want <= 591; want++ {
		ev, err := late.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.ResourceVersion != fmt.Sprint(want) {
			t.Fatalf("event at rv %s, want %d", ev.ResourceVersion, want)
		}
	}
}

func TestClosingTheHubEndsSubscriptions(t *testing.T) {
	c := hubtest.NewCluster(t)
	h := New(Config{Logger: slog.New(slog.DiscardHandler)}, c, c)
	ctx := context.Background()
	s, err := h.Watch(ctx, WatchRequest{Selector: Selector{Resource: hubtest.ConfigMaps}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h.Close()
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done was not closed")
	}
	if _, err := s.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
	if _, err := h.Watch(ctx, WatchRequest{Selector: Selector{Resource: hubtest.ConfigMaps}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Watch after Close: %v, want ErrClosed", err)
	}
}

// TestAPanicInTheHandlerStopsOnlyItsFeed: a bug that panics in the
// informer's handler ends that resource type's subscriptions with an error
// that is none of the retryable ones; the process lives on, and the next
// request starts a fresh informer. Also when stopping the feed panics too,
// as a feed whose state the first panic broke might.
func TestAPanicInTheHandlerStopsOnlyItsFeed(t *testing.T) {
	for _, stopPanics := range []bool{false, true} {
		t.Run(fmt.Sprintf("stopping panics %v", stopPanics), func(t *testing.T) {
			c := hubtest.NewCluster(t)
			c.ConfigMaps().Add(hubtest.ConfigMap("ns", "a", nil, "v1"))
			h := New(Config{Logger: slog.New(slog.DiscardHandler)}, c, c)
			defer h.Close()
			ctx := context.Background()
			s, err := h.Watch(ctx, WatchRequest{Selector: Selector{Resource: hubtest.ConfigMaps}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()

			if stopPanics {
				PanicWhenStopping(h)
			}
			if err := PanicInProcess(h, hubtest.ConfigMaps); err == nil || !strings.Contains(err.Error(), "panic") {
				t.Fatalf("the handler returned %v, want the panic as an error", err)
			}
			select {
			case <-s.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the subscription did not end")
			}
			_, err = s.Next(ctx)
			var resErr *ResourceError
			if !errors.As(err, &resErr) || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "panic") {
				t.Fatalf("the subscription ended with %v, want a ResourceError for the panic", err)
			}

			again, err := h.Watch(ctx, WatchRequest{Selector: Selector{Resource: hubtest.ConfigMaps}, SendInitialEvents: true})
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			if ev, err := again.Next(ctx); err != nil || ev.Type != EventAdded {
				t.Fatalf("a new watch got %v, %v; want the object from a fresh informer", ev, err)
			}
			if n := c.InformersStarted(hubtest.ConfigMaps); n != 2 {
				t.Fatalf("%d informers started, want 2", n)
			}
		})
	}
}

// relisted returns a hub whose ConfigMaps feed relisted: the list was at rv
// 3 (objects a, b, c) and the hub received the creation of z (rv 4); it then
// missed a change of a (rv 5) and the deletion of b (rv 6), and its expired
// watch made it relist at rv 6. It also returns a subscription, which has
// read z and has the relist's two events to read.
func relisted(t *testing.T) (*hubtest.Cluster, *Hub, *Subscription) {
	t.Helper()
	c := hubtest.NewCluster(t)
	for _, name := range []string{"a", "b", "c"} {
		c.ConfigMaps().Add(hubtest.ConfigMap("ns", name, nil, "v1"))
	}
	h := New(Config{Logger: slog.New(slog.DiscardHandler)}, c, c)
	t.Cleanup(h.Close)
	s, err := h.Watch(context.Background(), WatchRequest{Selector: Selector{Resource: hubtest.ConfigMaps}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	// Once the hub has z, its watch is open: the changes it then misses are
	// missed by that watch, not listed by a watch opened after them.
	c.ConfigMaps().Add(hubtest.ConfigMap("ns", "z", nil, "v1"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Next(ctx); err != nil {
		t.Fatal(err)
	}
	c.ConfigMaps().ModifyDropWatch(hubtest.ConfigMap("ns", "a", nil, "v2"))
	c.ConfigMaps().DeleteDropWatch(hubtest.ConfigMap("ns", "b", nil, "v1"))
	c.ConfigMaps().ResetWatch()
	return c, h, s
}

// TestForeignTokenInsideAnEmptyRelist: a relist that found no difference
// may still have jumped over an object's whole life. A token from inside
// the jump must not be placed after it: its client holds the object, and
// would never learn of its deletion.
func TestForeignTokenInsideAnEmptyRelist(t *testing.T) {
	c := hubtest.NewCluster(t)
	c.ConfigMaps().Add(hubtest.ConfigMap("ns", "a", nil, "")) // rv 1
	h := New(Config{BookmarkInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}, c, c)
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sel := Selector{Resource: hubtest.ConfigMaps}
	s, err := h.Watch(ctx, WatchRequest{Selector: sel})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Once the hub has y, its watch is open (see relisted).
	c.ConfigMaps().Add(hubtest.ConfigMap("ns", "y", nil, "")) // rv 2
	if _, err := s.Next(ctx); err != nil {
		t.Fatal(err)
	}
	c.ConfigMaps().AddDropWatch(hubtest.ConfigMap("ns", "x", nil, ""))    // rv 3, unseen
	c.ConfigMaps().DeleteDropWatch(hubtest.ConfigMap("ns", "x", nil, "")) // rv 4, unseen
	c.ConfigMaps().ResetWatch()
	for { // until a bookmark shows the relist at rv 4
		ev, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != EventBookmark {
			t.Fatalf("the relist found no difference, yet the subscriber got %s", ev.Type)
		}
		if ev.ResourceVersion == "4" {
			break
		}
	}
	_, err = h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: ForgeToken("configmaps.v1", 999, 0, 3, 0)})
	if !errors.Is(err, ErrTokenExpired) {
		t.Fatalf("Watch from a token inside the relist's jump (with x): %v, want ErrTokenExpired", err)
	}
}

func TestForeignTokensAroundARelist(t *testing.T) {
	_, h, s := relisted(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 2 {
		if _, err := s.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		rv      uint64
		wantErr error
		want    int // events to expect, all of the relist
	}{
		{"before the relist", 4, nil, 2},
		// The relist happened because the fake dropped its changes, as a
		// compacted etcd does: the API server cannot replay them either.
		{"inside the versions the relist jumped across", 5, ErrTokenExpired, 0},
		{"after the relist", 6, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, err := h.Watch(ctx, WatchRequest{Selector: Selector{Resource: hubtest.ConfigMaps}, ResumeToken: ForgeToken("configmaps.v1", 999, 0, tt.rv, 0)})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Watch: %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			defer sub.Close()
			for range tt.want {
				if _, err := sub.Next(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestResumeFromInsideARelist resumes from the token of every response of a
// relist batch, with and without initial events: each token is accepted,
// and the stream that follows brings the client to the same state.
func TestResumeFromInsideARelist(t *testing.T) {
	c, h, s := relisted(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sel := Selector{Resource: hubtest.ConfigMaps}
	var tokens []string
	for range 2 {
		ev, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, ev.ResumeToken)
	}
	c.ConfigMaps().Add(hubtest.ConfigMap("z", "marker", nil, ""))
	for i, tok := range tokens {
		t.Run(fmt.Sprintf("after event %d", i+1), func(t *testing.T) {
			sub, err := h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: tok})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			n := 0
			for ; ; n++ {
				ev, err := sub.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(ev.Object, `"name":"marker"`) {
					break
				}
			}
			if want := len(tokens) - 1 - i; n != want {
				t.Fatalf("%d events before the marker, want %d", n, want)
			}
		})
		t.Run(fmt.Sprintf("initial events after event %d", i+1), func(t *testing.T) {
			objects := map[string]bool{}
			var mid string
			sub, err := h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: tok, SendInitialEvents: true})
			if err != nil {
				t.Fatal(err)
			}
			for {
				ev, err := sub.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if mid == "" && ev.Type == EventAdded {
					// Resume once from inside the initial events.
					mid = ev.ResumeToken
					objects[nameOf(ev.Object)] = true
					sub.Close()
					if sub, err = h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: mid}); err != nil {
						t.Fatalf("resuming from an initial event's token: %v", err)
					}
					continue
				}
				if ev.Type == EventBookmark {
					continue
				}
				objects[nameOf(ev.Object)] = ev.Type != EventDeleted
				if nameOf(ev.Object) == "marker" {
					break
				}
			}
			sub.Close()
			want := map[string]bool{"a": true, "c": true, "z": true, "marker": true}
			for name, present := range objects {
				if present != want[name] {
					t.Errorf("%s present=%v, want %v (state %v)", name, present, want[name], objects)
				}
			}
			for name := range want {
				if !objects[name] {
					t.Errorf("%s missing from the resulting state %v", name, objects)
				}
			}
		})
	}
}

func nameOf(objectJSON string) string {
	_, after, _ := strings.Cut(objectJSON, `"name":"`)
	name, _, _ := strings.Cut(after, `"`)
	return name
}

func TestCloseWhileNextRuns(t *testing.T) {
	c := hubtest.NewCluster(t)
	h := New(Config{Logger: slog.New(slog.DiscardHandler)}, c, c)
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sel := Selector{Resource: hubtest.ConfigMaps}

	t.Run("a live Next returns", func(t *testing.T) {
		s, err := h.Watch(ctx, WatchRequest{Selector: sel})
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := s.Next(ctx)
			errc <- err
		}()
		s.Close()
		if err := <-errc; !errors.Is(err, ErrSubscriptionClosed) {
			t.Fatalf("Next: %v, want ErrSubscriptionClosed", err)
		}
	})

	t.Run("a subscription closed while catching up never goes live", func(t *testing.T) {
		start, err := h.Watch(ctx, WatchRequest{Selector: sel})
		if err != nil {
			t.Fatal(err)
		}
		token := start.ResumeToken()
		c.ConfigMaps().Add(hubtest.ConfigMap("ns", "a", nil, ""))
		if _, err := start.Next(ctx); err != nil {
			t.Fatal(err)
		}
		start.Close()
		s, err := h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: token}) // catches up
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if _, err := s.Next(ctx); !errors.Is(err, ErrSubscriptionClosed) {
			t.Fatalf("Next after Close: %v, want ErrSubscriptionClosed", err)
		}
		if n := LiveSubscribers(h, hubtest.ConfigMaps); n != 0 {
			t.Fatalf("%d live subscribers after every subscription was closed", n)
		}
	})
}

// TestReplayBeyondTheHistory: a history bounded by bytes evicts changes a
// subscriber's token needs; resuming replays them from the API server and
// joins the history exactly, and the hub reports its window.
func TestReplayBeyondTheHistory(t *testing.T) {
	// Room for about three records of these ConfigMaps' creations (their
	// objects are the state's: each record counts itself and its event).
	const record = 460
	fx := newResumeFixture(t, Config{HistoryBytes: 3 * record})
	c, h, ctx, sel, start := fx.c, fx.h, fx.ctx, fx.sel, fx.start
	fx.add("ns", 10) // rv 2..11
	rs, err := h.Resources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	window := rs[0]
	// The events subscribers built after the newest change count against
	// the bound from the next change on: at most one more record's worth.
	if window.HistoryEvents < 1 || window.HistoryEvents > 3 || window.HistoryBytes > 4*record || window.HistoryResourceVersion == "0" {
		t.Fatalf("history window %d events, %d bytes, from rv %s: want at most 3 events within about %d bytes, evicted past rv 0",
			window.HistoryEvents, window.HistoryBytes, window.HistoryResourceVersion, 3*record)
	}

	resumed, err := h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: start})
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	c.ConfigMaps().Add(hubtest.ConfigMap("ns", "after", nil, "")) // rv 12, live
	for want := 2; want <= 12; want++ {
		ev, err := resumed.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.ResourceVersion != fmt.Sprint(want) || ev.Type != EventAdded {
			t.Fatalf("event %d: %s at rv %s, want ADDED at rv %d", want, ev.Type, ev.ResourceVersion, want)
		}
	}
	if Replaying(resumed) {
		t.Fatal("the resumed subscription still reads the API server: it did not join the history")
	}

	// A subscription closed in the middle of a replay ends its upstream
	// watch (TestMain checks that no goroutine leaks).
	mid, err := h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: start})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mid.Next(ctx); err != nil {
		t.Fatal(err)
	}
	mid.Close()
	if _, err := mid.Next(ctx); !errors.Is(err, ErrSubscriptionClosed) {
		t.Fatalf("Next after Close: %v, want ErrSubscriptionClosed", err)
	}
}

// TestReplaysAreBounded: with one replay slot, a second replay waits until
// the first one's subscription ends.
func TestReplaysAreBounded(t *testing.T) {
	fx := newResumeFixture(t, Config{HistorySize: 2, MaxConcurrentReplays: 1})
	h, ctx, sel, start := fx.h, fx.ctx, fx.sel, fx.start
	fx.add("ns", 5) // past the history
	first, err := h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: start})
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if _, err := h.Watch(short, WatchRequest{Selector: sel, ResumeToken: start}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second replay while the only slot is taken: %v, want it to wait (until its deadline)", err)
	}
	first.Close()
	second, err := h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: start})
	if err != nil {
		t.Fatalf("a replay once the slot is free: %v", err)
	}
	second.Close()
}

// TestOneOwnerCannotTakeEveryReplaySlot: an owner's replays beyond its
// share wait for its own, while another owner's replay takes a free slot.
func TestOneOwnerCannotTakeEveryReplaySlot(t *testing.T) {
	fx := newResumeFixture(t, Config{HistorySize: 2, MaxConcurrentReplays: 3, MaxReplaysPerOwner: 1})
	h, ctx, sel, start := fx.h, fx.ctx, fx.sel, fx.start
	fx.add("ns", 5) // past the history
	first, err := h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: start, Owner: "greedy"})
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if _, err := h.Watch(short, WatchRequest{Selector: sel, ResumeToken: start, Owner: "greedy"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the owner's second replay with a share of one: %v, want it to wait (until its deadline)", err)
	}
	other, err := h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: start, Owner: "other"})
	if err != nil {
		t.Fatalf("another owner's replay beside it: %v", err)
	}
	other.Close()
	first.Close()
	second, err := h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: start, Owner: "greedy"})
	if err != nil {
		t.Fatalf("the owner's replay once its share is free: %v", err)
	}
	second.Close()
}

// resumeFixture is a hub on a fake cluster holding one ConfigMap (rv 1:
// versions start above 0, as on a cluster), a live subscription on it, and
// the token of that subscription's start, to resume from after changes.
type resumeFixture struct {
	t     *testing.T
	c     *hubtest.Cluster
	h     *Hub
	ctx   context.Context
	sel   Selector
	live  *Subscription
	start string
}

func newResumeFixture(t *testing.T, cfg Config) *resumeFixture {
	t.Helper()
	c := hubtest.NewCluster(t)
	c.ConfigMaps().Add(hubtest.ConfigMap("ns", "first", nil, ""))
	cfg.Logger = slog.New(slog.DiscardHandler)
	h := New(cfg, c, c)
	t.Cleanup(h.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	sel := Selector{Resource: hubtest.ConfigMaps}
	live, err := h.Watch(ctx, WatchRequest{Selector: sel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(live.Close)
	return &resumeFixture{t: t, c: c, h: h, ctx: ctx, sel: sel, live: live, start: live.ResumeToken()}
}

// scrapeUntil polls the feed's Stats, as a scrape would, until cond holds
// of them, and returns them: for what the informer does on its own, which
// nothing announces. The fixture's minute only bounds a hang.
func (fx *resumeFixture) scrapeUntil(what string, cond func(ResourceStats) bool) ResourceStats {
	fx.t.Helper()
	scrape := time.NewTicker(10 * time.Millisecond)
	defer scrape.Stop()
	for {
		if st := fx.h.Stats(); len(st) == 1 && cond(st[0]) {
			return st[0]
		}
		select {
		case <-fx.ctx.Done():
			fx.t.Fatalf("Stats never said %s: %+v", what, fx.h.Stats())
		case <-scrape.C:
		}
	}
}

// add creates n ConfigMaps in ns and waits until the hub has them.
func (fx *resumeFixture) add(ns string, n int) {
	fx.t.Helper()
	for i := range n {
		fx.c.ConfigMaps().Add(hubtest.ConfigMap(ns, fmt.Sprint(i), nil, ""))
		if _, err := fx.live.Next(fx.ctx); err != nil {
			fx.t.Fatal(err)
		}
	}
}

// TestStatefulReplaysAreBoundedByBytes: a replay with a filter holds the
// objects of its selection; one that would take the replays past
// MaxReplayStateBytes is refused, and what a replay held is given back
// when it ends.
func TestStatefulReplaysAreBoundedByBytes(t *testing.T) {
	// Room for the state of one replay of six small ConfigMaps (about
	// 1000 bytes), not two.
	fx := newResumeFixture(t, Config{HistorySize: 2, MaxReplayStateBytes: 1500})
	h, ctx, start := fx.h, fx.ctx, fx.start
	fx.add("ns", 5) // past the history
	filtered := Selector{Resource: hubtest.ConfigMaps, Filter: `object.metadata.name != "x"`}
	first, err := h.Watch(ctx, WatchRequest{Selector: filtered, ResumeToken: start})
	if err != nil {
		t.Fatal(err)
	}
	if !Replaying(first) {
		t.Fatal("the subscription does not replay: the test tests nothing")
	}
	_, err = h.Watch(ctx, WatchRequest{Selector: filtered, ResumeToken: start, IncludePrevious: true})
	var limit *LimitError
	if !errors.As(err, &limit) || limit.Limit != LimitReplayState || !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("a second replay past the budget: %v, want a LimitError on %s", err, LimitReplayState)
	}
	if used := ReplayStateBytes(h); used <= 0 || used > 1500 {
		t.Fatalf("the replays hold %d bytes of a budget of 1500", used)
	}
	// Without a filter, projection or previous state, a replay holds
	// nothing and is not refused.
	plain, err := h.Watch(ctx, WatchRequest{Selector: Selector{Resource: hubtest.ConfigMaps}, ResumeToken: start})
	if err != nil {
		t.Fatalf("a replay without state: %v", err)
	}
	plain.Close()
	first.Close()
	if used := ReplayStateBytes(h); used != 0 {
		t.Fatalf("after the replays ended, %d bytes are still held", used)
	}
	second, err := h.Watch(ctx, WatchRequest{Selector: filtered, ResumeToken: start, IncludePrevious: true})
	if err != nil {
		t.Fatalf("once the first replay ended: %v", err)
	}
	second.Close()
}

// TestAStatefulReplayHoldsOnlyWhatItSelects: the objects of the upstream
// selection that the filter does not select cost a stateful replay
// nothing: a tenant's filter over a large namespace that selects little
// holds little of the budget all replays share.
func TestAStatefulReplayHoldsOnlyWhatItSelects(t *testing.T) {
	fx := newResumeFixture(t, Config{HistorySize: 2})
	h, ctx, start := fx.h, fx.ctx, fx.start
	fx.add("ns", 5) // past the history
	none := Selector{Resource: hubtest.ConfigMaps, Filter: `object.metadata.name == "none"`}
	s, err := h.Watch(ctx, WatchRequest{Selector: none, ResumeToken: start})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !Replaying(s) {
		t.Fatal("the subscription does not replay: the test tests nothing")
	}
	if used := ReplayStateBytes(h); used != 0 {
		t.Errorf("a replay whose filter selects none of six objects holds %d bytes, want none", used)
	}
}

// TestStatefulReplaysListOnlyWhatTheAPIServerStillHas: the watch of a
// stateful replay opens before its LIST, so a token the API server no
// longer has costs it a refused watch, not a LIST of the selection; and a
// replay whose state alone would exceed MaxReplayStateBytes is answered
// ErrTokenExpired (start over from a snapshot), not a retry that could
// never succeed.
func TestStatefulReplaysListOnlyWhatTheAPIServerStillHas(t *testing.T) {
	fx := newResumeFixture(t, Config{HistorySize: 2, MaxReplayStateBytes: 300})
	c, h, ctx, start := fx.c, fx.h, fx.ctx, fx.start
	fx.add("ns", 5) // past the history
	previous := WatchRequest{Selector: Selector{Resource: hubtest.ConfigMaps}, ResumeToken: start, IncludePrevious: true}

	_, err := h.Watch(ctx, previous)
	var expired *ExpiredError
	if !errors.As(err, &expired) || !expired.TooLarge {
		t.Fatalf("a replay whose state exceeds the whole budget: %v, want ErrTokenExpired for its size", err)
	}

	c.Compact(hubtest.ConfigMaps)
	lists := c.Lists(hubtest.ConfigMaps)
	if _, err := h.Watch(ctx, previous); !errors.As(err, &expired) || !expired.Upstream {
		t.Fatalf("a compacted token: %v, want ErrTokenExpired from the API server", err)
	}
	if n := c.Lists(hubtest.ConfigMaps) - lists; n != 0 {
		t.Errorf("a compacted token cost %d LISTs, want none", n)
	}
}

// TestAFeedThatCannotAdvanceEnds: after the hub loses its RBAC, its
// informer's lists and watches fail; its subscribers do not wait on a
// position that no longer moves: once MaxUpstreamFailure has passed with
// nothing delivered, they end with ErrUnavailable, and the informer is
// stopped, so that the next request starts a fresh one. (That they then
// resume exactly is shown against a real API server, in
// test/integration: this fake forgets its history when it ends a watch.)
func TestAFeedThatCannotAdvanceEnds(t *testing.T) {
	fx := newResumeFixture(t, Config{MaxUpstreamFailure: 300 * time.Millisecond})
	c, h, ctx, sel := fx.c, fx.h, fx.ctx, fx.sel
	sub, err := h.Watch(ctx, WatchRequest{Selector: sel})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	c.Forbid(hubtest.ConfigMaps, true)
	c.ConfigMaps().ResetWatch() // its watch ends; relisting is forbidden
	_, err = sub.Next(ctx)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "delivered nothing") {
		t.Fatalf("the stale feed's subscriber got %v, want ErrUnavailable", err)
	}
	if st := h.Stats(); len(st) != 1 || st[0].InformerActive {
		t.Fatalf("stats %+v: the stale informer still runs", st)
	}
	c.Forbid(hubtest.ConfigMaps, false)
	fresh, err := h.Watch(ctx, WatchRequest{Selector: sel})
	if err != nil {
		t.Fatal(err)
	}
	fresh.Close()
	if n := c.InformersStarted(hubtest.ConfigMaps); n != 2 {
		t.Fatalf("%d informers started, want a fresh one after the stale one", n)
	}
}

// TestAFeedWhoseAPIServerIsDownEnds: an API server the hub cannot reach
// refuses its connections; the reflector retries a refused watch itself,
// with backoff, without telling its error handler. The feed still counts
// as failing, and ends after MaxUpstreamFailure, as one whose requests are
// forbidden does. The watch the reset ends had delivered a change, so the
// reflector tries at once to watch again (not to list, after a backoff,
// as after a "very short" watch).
func TestAFeedWhoseAPIServerIsDownEnds(t *testing.T) {
	fx := newResumeFixture(t, Config{MaxUpstreamFailure: 300 * time.Millisecond})
	c, h, ctx := fx.c, fx.h, fx.ctx
	fx.add("ns", 1) // on the watch the reset ends
	c.Unreachable(hubtest.ConfigMaps, true)
	c.ConfigMaps().ResetWatch()
	var err error
	for err == nil { // the hub's own bookmarks may come first
		var ev *Event
		if ev, err = fx.live.Next(ctx); err == nil && ev.Type != EventBookmark {
			t.Fatalf("a feed whose API server is down delivered %+v", ev)
		}
	}
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "delivered nothing") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("the subscriber of a feed whose API server is down got %v, want ErrUnavailable for a refused connection", err)
	}
	if st := h.Stats(); len(st) != 1 || st[0].InformerActive {
		t.Fatalf("stats %+v: the stale informer still runs", st)
	}
}

// TestStatsTellAFailingUpstream: while an informer's lists and watches
// fail, Stats says since when; a delivery clears it.
func TestStatsTellAFailingUpstream(t *testing.T) {
	fx := newResumeFixture(t, Config{})
	c, h := fx.c, fx.h
	progress := h.Stats()[0].UpstreamProgress
	if progress.IsZero() || !h.Stats()[0].UpstreamFailingSince.IsZero() {
		t.Fatalf("a synced feed: progress %v, failing since %v", progress, h.Stats()[0].UpstreamFailingSince)
	}
	// Every list and watch from here on is refused, and the reset ends the
	// informer's watch (one being opened is open before Forbid returns, see
	// hubtest.Cluster.Forbid), so its next request fails: at once, or, if
	// the watch was "very short" (no event in under a second, which the
	// reflector ends without calling its error handler), as it relists
	// after its first backoff (0.8 to 1.6 s). Until then Stats is polled, as
	// a scrape would; the fixture's minute only bounds a hang.
	c.Forbid(hubtest.ConfigMaps, true)
	c.ConfigMaps().ResetWatch()
	fx.scrapeUntil("the upstream was failing", func(st ResourceStats) bool { return !st.UpstreamFailingSince.IsZero() })
	c.Forbid(hubtest.ConfigMaps, false)
	fx.add("ns", 1) // delivered once the reflector retries
	if st := h.Stats()[0]; !st.UpstreamFailingSince.IsZero() || !st.UpstreamProgress.After(progress) {
		t.Fatalf("after a delivery: progress %v, failing since %v", st.UpstreamProgress, st.UpstreamFailingSince)
	}
}

// TestStatsTellAnUnreachableUpstream: while the API server refuses the
// hub's connections, Stats says the informer is failing, though the
// reflector retries its watch without telling its error handler; once a
// watch opens again, it is not failing, though it has delivered nothing.
func TestStatsTellAnUnreachableUpstream(t *testing.T) {
	fx := newResumeFixture(t, Config{})
	c, h := fx.c, fx.h
	fx.add("ns", 1) // on the watch the reset ends: the reflector watches again at once
	progress := h.Stats()[0].UpstreamProgress
	c.Unreachable(hubtest.ConfigMaps, true)
	c.ConfigMaps().ResetWatch()
	st := fx.scrapeUntil("the upstream was failing", func(st ResourceStats) bool { return !st.UpstreamFailingSince.IsZero() })
	if !st.UpstreamProgress.Equal(progress) || !st.InformerActive {
		t.Fatalf("a failing upstream: progress %v (was %v), informer active %v", st.UpstreamProgress, progress, st.InformerActive)
	}
	c.Unreachable(hubtest.ConfigMaps, false)
	// The reflector watches again after a backoff, without a list.
	st = fx.scrapeUntil("the upstream had recovered", func(st ResourceStats) bool { return st.UpstreamFailingSince.IsZero() })
	if !st.UpstreamProgress.Equal(progress) {
		t.Fatalf("after the watch reopened: progress %v, want %v: nothing was delivered", st.UpstreamProgress, progress)
	}
	fx.add("ns", 1) // on the reopened watch
}
