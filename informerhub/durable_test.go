package informerhub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

// openStore opens the history store in dir, closed when the test ends
// (after the hubs, which t.Cleanup closes first: cleanups run last first).
func openStore(t *testing.T, dir string) *historystore.Store {
	t.Helper()
	s, err := historystore.Open(historystore.Options{Dir: dir, MemTableBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// sent is what a client sees of an event.
type sent struct {
	Type                                     informerhub.EventType
	Object, ResourceVersion, Token, Previous string
	FromRelist                               bool
}

func sentOf(e *informerhub.Event) sent {
	return sent{e.Type, e.Object, e.ResourceVersion, e.ResumeToken, e.PreviousObject, e.FromRelist}
}

// nextSent reads n changes.
func nextSent(t *testing.T, s *informerhub.Subscription, n int) []sent {
	t.Helper()
	out := make([]sent, 0, n)
	for len(out) < n {
		out = append(out, sentOf(nextChange(t, s)))
	}
	return out
}

// A hub that restarts resumes its tokens from the disk exactly: the events
// it sends again are those it sent (object bytes, versions, tokens), though
// its memory held only the newest few; its informer continues the stored
// state with a watch from the stored version, so what changed while it was
// down follows exactly, not as a relist.
func TestTokensResumeFromTheDiskAcrossARestart(t *testing.T) {
	c := newFakeCluster(t)
	store := openStore(t, t.TempDir())
	cfg := informerhub.Config{HistoryStore: store, HistorySize: 10}
	h1 := newHub(t, c, cfg)
	s := watch(t, h1, informerhub.WatchRequest{IncludePrevious: true})
	for i := range 40 {
		c.cms().Add(configMap("ns", fmt.Sprint(i%15), nil, fmt.Sprint(i)))
	}
	c.cms().Delete(configMap("ns", "3", nil, ""))
	live := nextSent(t, s, 41)
	s.Close()
	h1.Close()

	c.cms().Add(configMap("ns", "down", nil, ""))
	h2 := newHub(t, c, cfg)
	s = watch(t, h2, informerhub.WatchRequest{IncludePrevious: true, ResumeToken: live[4].Token})
	got := nextSent(t, s, 37)
	if diff := cmp.Diff(live[5:], got[:36]); diff != "" {
		t.Errorf("events resumed from the disk differ from those sent live (-live +disk):\n%s", diff)
	}
	if !strings.Contains(got[36].Object, `"name":"down"`) || got[36].Type != informerhub.EventAdded || got[36].FromRelist {
		t.Errorf("after the disk: %+v, want the exact ADDED of the object created while the hub was down", got[36])
	}
	// A subscriber that keeps up continues live.
	c.cms().Add(configMap("ns", "after", nil, ""))
	if e := nextChange(t, s); !strings.Contains(e.Object, `"name":"after"`) {
		t.Errorf("live after resuming: %s", e.Object)
	}
}

// When the API server no longer has the version the hub stopped at, the
// gap becomes a relist: a client resuming across it receives the real
// differences, each marked FromRelist, then exact changes again.
func TestAGapTheAPIServerForgotIsARelistRange(t *testing.T) {
	c := newFakeCluster(t)
	store := openStore(t, t.TempDir())
	cfg := informerhub.Config{HistoryStore: store}
	for _, name := range []string{"a", "b"} {
		c.cms().Add(configMap("ns", name, nil, "1"))
	}
	h1 := newHub(t, c, cfg)
	s := watch(t, h1, informerhub.WatchRequest{})
	c.cms().Add(configMap("ns", "c", nil, "1"))
	before := sentOf(nextChange(t, s))
	s.Close()
	h1.Close()

	c.cms().Modify(configMap("ns", "a", nil, "2"))
	c.cms().Modify(configMap("ns", "a", nil, "3"))
	c.cms().Delete(configMap("ns", "b", nil, ""))
	c.cms().Add(configMap("ns", "d", nil, "1"))
	c.Compact(configMaps)

	h2 := newHub(t, c, cfg)
	s = watch(t, h2, informerhub.WatchRequest{ResumeToken: before.Token})
	got := map[string]informerhub.EventType{}
	for range 3 {
		e := nextChange(t, s)
		if !e.FromRelist {
			t.Errorf("%v %s across the gap is not marked FromRelist", e.Type, e.Object)
		}
		got[keyOf(t, e.Object)] = e.Type
	}
	want := map[string]informerhub.EventType{"ns/a": informerhub.EventModified, "ns/b": informerhub.EventDeleted, "ns/d": informerhub.EventAdded}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("differences across the gap (-want +got):\n%s", diff)
	}
	c.cms().Add(configMap("ns", "e", nil, "1"))
	if e := nextChange(t, s); e.FromRelist || keyOf(t, e.Object) != "ns/e" {
		t.Errorf("after the gap: %v %s FromRelist=%v, want the exact ADDED of ns/e", e.Type, e.Object, e.FromRelist)
	}
}

func keyOf(t *testing.T, obj string) string {
	t.Helper()
	var m struct {
		Metadata struct{ Namespace, Name string }
	}
	if err := json.Unmarshal([]byte(obj), &m); err != nil {
		t.Fatalf("%v: %s", err, obj)
	}
	return m.Metadata.Namespace + "/" + m.Metadata.Name
}

// Retention deletes the oldest records; a token older than what remains,
// whose version the API server no longer has either, is expired with a
// message that says where the history begins, and how long ago that was.
func TestRetentionExpiresTheOldestTokens(t *testing.T) {
	c := newFakeCluster(t)
	store := openStore(t, t.TempDir())
	h := newHub(t, c, informerhub.Config{HistoryStore: store, HistorySize: 10, HistoryRetention: time.Hour})
	s := watch(t, h, informerhub.WatchRequest{})
	for i := range 30 {
		c.cms().Add(configMap("ns", fmt.Sprint(i), nil, ""))
	}
	live := nextSent(t, s, 30)
	informerhub.ApplyRetention(h)
	if first, last := informerhub.DiskWindow(h, configMaps); first != 1 || last != 30 {
		t.Fatalf("the disk holds records %d to %d within retention, want 1 to 30", first, last)
	}

	// Retention by size: past the limit, records go oldest first, here
	// all of them (the store's own files exceed it); the state stays, so a
	// token at the newest record resumes.
	h.Close()
	h = newHub(t, c, informerhub.Config{HistoryStore: store, HistorySize: 10, HistoryRetention: time.Hour, HistoryDiskBytes: 1})
	s = watch(t, h, informerhub.WatchRequest{ResumeToken: live[29].Token})
	informerhub.ApplyRetention(h)
	if first, last := informerhub.DiskWindow(h, configMaps); first != 31 || last != 30 {
		t.Fatalf("over its size limit, the disk holds records %d to %d, want none", first, last)
	}
	c.Compact(configMaps)
	_, err := h.Watch(context.Background(), informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps}, ResumeToken: live[0].Token})
	var expired *informerhub.ExpiredError
	if !errors.As(err, &expired) || !strings.Contains(err.Error(), "which begins at resourceVersion 30, reached") {
		t.Fatalf("a token older than the history: %v, want ExpiredError saying where the history begins", err)
	}
	c.cms().Add(configMap("ns", "after", nil, ""))
	if e := nextChange(t, s); keyOf(t, e.Object) != "ns/after" {
		t.Errorf("resumed at the newest record: %s, want ns/after", e.Object)
	}
}

// A retained resource type's informer runs from the start, with no
// subscriber, and never stops for idleness; ListResources says so, and
// counts no subscriber for it.
func TestRetainedResourceTypesRunWithoutSubscribers(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{Retain: []string{"configmaps", "nothing.example.com"}, IdleTimeout: time.Nanosecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := informerhub.WaitRetained(ctx, h, configMaps); err != nil {
		t.Fatal(err)
	}
	s := watch(t, h, informerhub.WatchRequest{})
	s.Close()
	if informerhub.IdleTimerArmed(h, configMaps) {
		t.Error("the retained informer will stop for idleness")
	}
	if n := c.informersStarted(configMaps); n != 1 {
		t.Errorf("%d informers started, want the retained one only", n)
	}
	res, err := h.Resources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.Resource != configMaps || !r.Retained || !r.InformerActive || r.Subscribers != 0 {
		t.Errorf("ListResources: %+v, want configmaps retained, active, with no subscriber", r)
	}
}

// Retention that cuts inside a relist's differences sets the floor to the
// newest deleted change's version, not the version before the relist: a
// token of another instance there must not be placed after the deleted
// part of the differences.
func TestACutInsideARelistExpiresTokensBeforeIt(t *testing.T) {
	c := newFakeCluster(t)
	for _, n := range []string{"a", "b", "c"} {
		c.cms().Add(configMap("ns", n, nil, "1")) // rv 1..3
	}
	h := newHub(t, c, informerhub.Config{HistoryStore: openStore(t, t.TempDir()), HistorySize: 2})
	s := watch(t, h, informerhub.WatchRequest{})
	c.cms().Add(configMap("ns", "z", nil, "1")) // rv 4, seq 1
	nextChange(t, s)
	c.cms().ModifyDropWatch(configMap("ns", "a", nil, "2")) // rv 5
	c.cms().DeleteDropWatch(configMap("ns", "b", nil, "1")) // rv 6
	c.cms().AddDropWatch(configMap("ns", "d", nil, "1"))    // rv 7
	c.cms().ResetWatch()
	nextSent(t, s, 3) // the relist's differences: seqs 2 to 4
	for _, n := range []string{"e", "f", "g"} {
		c.cms().Add(configMap("ns", n, nil, "1"))
		nextChange(t, s)
	}
	informerhub.ApplyRetention(h)
	if err := informerhub.CutDisk(h, configMaps, 3); err != nil { // inside the differences
		t.Fatal(err)
	}
	_, err := h.Watch(context.Background(), informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps},
		ResumeToken: informerhub.ForgeToken("configmaps.v1", 999, 0, 4, 0)})
	if !errors.Is(err, informerhub.ErrTokenExpired) {
		t.Fatalf("a token before a relist whose differences were cut: %v, want ErrTokenExpired", err)
	}
}

// A second relist keeps the first one's range while the disk reaches it:
// a token from inside the first relist's jump stays expired.
func TestASecondRelistKeepsTheFirstOnesRangeOnDisk(t *testing.T) {
	c := newFakeCluster(t)
	c.cms().Add(configMap("ns", "a", nil, "")) // rv 1
	h := newHub(t, c, informerhub.Config{HistoryStore: openStore(t, t.TempDir()), HistorySize: 2})
	s := watch(t, h, informerhub.WatchRequest{})
	c.cms().Add(configMap("ns", "y", nil, "")) // rv 2
	nextChange(t, s)
	c.cms().AddDropWatch(configMap("ns", "x", nil, ""))    // rv 3, unseen
	c.cms().DeleteDropWatch(configMap("ns", "x", nil, "")) // rv 4, unseen
	c.cms().ResetWatch()
	informerhub.WaitForResourceVersion(h, configMaps, 4)
	inside := informerhub.ForgeToken("configmaps.v1", 999, 0, 3, 0)
	for _, n := range []string{"e", "f", "g", "h"} { // the memory moves past rv 4
		c.cms().Add(configMap("ns", n, nil, ""))
		nextChange(t, s)
	}
	req := informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps}, ResumeToken: inside}
	if _, err := h.Watch(context.Background(), req); !errors.Is(err, informerhub.ErrTokenExpired) {
		t.Fatalf("inside the first relist: %v, want ErrTokenExpired", err)
	}
	c.cms().ModifyDropWatch(configMap("ns", "e", nil, "2"))
	c.cms().ResetWatch()
	nextChange(t, s)
	informerhub.ApplyRetention(h)
	if _, err := h.Watch(context.Background(), req); !errors.Is(err, informerhub.ErrTokenExpired) {
		t.Fatalf("inside the first relist, after a second: %v, want ErrTokenExpired", err)
	}
}

// A disk that fails while a feed lists for the first time leaves the feed
// on memory alone, evicting as without a disk.
func TestADiskFailingBeforeTheFirstListLeavesMemoryAlone(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{HistoryStore: openStore(t, t.TempDir()), HistorySize: 10, IdleTimeout: time.Hour})
	c.Forbid(configMaps, true)
	if _, err := h.Watch(context.Background(), informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps}}); err == nil {
		t.Fatal("a Watch the API server forbids succeeded")
	}
	if !informerhub.OnDisk(h, configMaps) {
		t.Fatal("the feed did not attach to the disk before its first list")
	}
	informerhub.FailDisk(h)
	c.Forbid(configMaps, false)
	select {
	case <-informerhub.Synced(h, configMaps): // the informer's retry
	case <-time.After(time.Minute):
		t.Fatal("the informer did not sync once allowed")
	}
	s := watch(t, h, informerhub.WatchRequest{})
	for i := range 30 {
		c.cms().Add(configMap("ns", fmt.Sprint(i), nil, ""))
		nextChange(t, s)
	}
	if informerhub.OnDisk(h, configMaps) {
		t.Error("the feed still reads a failed disk")
	}
	if n := informerhub.HistoryLen(h, configMaps); n > 10 {
		t.Errorf("the history holds %d records with HistorySize 10 after the disk failed", n)
	}
	if st := h.Disk(); !st.Failed || st.WriteErrors == 0 {
		t.Errorf("Disk() = %+v, want failed", st)
	}
}

// Catching up from the disk with a selector that selects nothing returns
// to its caller between batches: a client that goes away ends the scan.
func TestACatchUpFromDiskStopsWithItsCaller(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{HistoryStore: openStore(t, t.TempDir()), HistorySize: 10})
	s := watch(t, h, informerhub.WatchRequest{})
	c.cms().Add(configMap("ns", "first", nil, ""))
	token := nextChange(t, s).ResumeToken
	const n = 5000
	for i := range n {
		c.cms().Add(configMap("ns", fmt.Sprint(i), nil, ""))
	}
	informerhub.WaitForResourceVersion(h, configMaps, n+1)
	informerhub.ApplyRetention(h)
	quiet := watch(t, h, informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps, Namespace: "none"}, ResumeToken: token})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := quiet.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with an ended context: %v, want context.Canceled", err)
	}
	// Each call reads one batch at most before it looks at its context
	// again: with one that ends after the first read, at most a batch.
	read := informerhub.DiskBatchesRead(h)
	ctx, cancel = context.WithCancel(context.Background())
	informerhub.OnDiskRead(h, cancel)
	if _, err := quiet.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next: %v, want context.Canceled", err)
	}
	if got := informerhub.DiskBatchesRead(h) - read; got != 1 {
		t.Errorf("Next read %d batches after its context ended during the first", got)
	}
}

// Everything a Watch may ask for holds when its events come from the disk:
// a CEL filter (objects entering and leaving it), a projection and the
// previous state give the events, tokens included, sent live.
func TestFiltersAndProjectionsResumeFromTheDisk(t *testing.T) {
	c := newFakeCluster(t)
	store := openStore(t, t.TempDir())
	cfg := informerhub.Config{HistoryStore: store, HistorySize: 5}
	req := informerhub.WatchRequest{
		Selector:        informerhub.Selector{Resource: configMaps, Filter: `has(object.data) && object.data.v.startsWith("keep")`},
		Fields:          []string{"metadata.name", "data"},
		IncludePrevious: true,
	}
	h1 := newHub(t, c, cfg)
	s := watch(t, h1, req)
	c.cms().Add(configMap("ns", "marker", nil, "keep-0"))
	first := sentOf(nextChange(t, s))
	for i := range 30 {
		v := "keep-" + fmt.Sprint(i)
		if i%3 == 0 {
			v = "drop-" + fmt.Sprint(i) // leaves the filter, or stays out
		}
		c.cms().Add(configMap("ns", fmt.Sprint(i%4), nil, v))
	}
	c.cms().Add(configMap("ns", "marker", nil, "keep-end"))
	var live []sent
	for {
		e := sentOf(nextChange(t, s))
		live = append(live, e)
		if keyOf(t, e.Object) == "ns/marker" { // the projection keeps an object's identity
			break
		}
	}
	s.Close()
	h1.Close()

	h2 := newHub(t, c, cfg)
	req.ResumeToken = first.Token
	s = watch(t, h2, req)
	got := nextSent(t, s, len(live))
	if diff := cmp.Diff(live, got); diff != "" {
		t.Errorf("filtered, projected events with previous states from the disk differ from those sent live (-live +disk):\n%s", diff)
	}
	kinds := map[informerhub.EventType]int{}
	for _, e := range live {
		kinds[e.Type]++
	}
	if kinds[informerhub.EventAdded] == 0 || kinds[informerhub.EventModified] == 0 || kinds[informerhub.EventDeleted] == 0 {
		t.Errorf("the events were %v: the test must see objects enter, change within and leave the filter", kinds)
	}
}

// TestARetentionCutDuringACatchUpFromDiskReplays checks that when retention
// deletes the disk records a subscriber is about to read (after the feed
// placed it on the disk, before the read), the subscriber replays from the
// API server, as one whose memory history moved past it does, rather than
// expire: every change after its token arrives, in order, none lost or
// repeated.
func TestARetentionCutDuringACatchUpFromDiskReplays(t *testing.T) {
	c := newFakeCluster(t)
	store := &racingStore{Store: openStore(t, t.TempDir())}
	h := newHub(t, c, informerhub.Config{HistoryStore: store, HistorySize: 10})
	s := watch(t, h, informerhub.WatchRequest{})
	c.cms().Add(configMap("ns", "first", nil, ""))
	token := nextChange(t, s).ResumeToken
	const n = 1000 // more than a batch of the disk
	for i := range n {
		c.cms().Add(configMap("ns", fmt.Sprint(i), nil, ""))
	}
	informerhub.WaitForResourceVersion(h, configMaps, n+1)
	informerhub.ApplyRetention(h)
	_, last := informerhub.DiskWindow(h, configMaps)

	reads := 0
	store.beforeRead = func() {
		if reads++; reads == 2 { // the second batch: everything the disk holds goes first
			if err := informerhub.CutDisk(h, configMaps, last+1); err != nil {
				t.Error(err)
			}
		}
	}
	resumed := watch(t, h, informerhub.WatchRequest{ResumeToken: token})
	for i := range n {
		e := nextChange(t, resumed)
		if want := fmt.Sprintf("ns/%d", i); keyOf(t, e.Object) != want || e.Type != informerhub.EventAdded {
			t.Fatalf("change %d after the token: %v %s, want the ADDED of %s", i, e.Type, keyOf(t, e.Object), want)
		}
	}
	if st := statsOf(t, h); st.Replays != 1 || st.ExpiredTokens != 0 || reads < 2 {
		t.Errorf("Replays %d, ExpiredTokens %d after %d reads: want the cut replayed once, nothing expired", st.Replays, st.ExpiredTokens, reads)
	}
}

// TestARetentionCutDuringAPlacementOnDiskReplays is the same race for a
// token placed among the disk's records by its resourceVersion (another
// replica's): retention deletes them between the feed's placing the token
// and the search.
func TestARetentionCutDuringAPlacementOnDiskReplays(t *testing.T) {
	c := newFakeCluster(t)
	other := newHub(t, c, informerhub.Config{})
	store := &racingStore{Store: openStore(t, t.TempDir())}
	h := newHub(t, c, informerhub.Config{HistoryStore: store, HistorySize: 10})
	theirs, ours := watch(t, other, informerhub.WatchRequest{}), watch(t, h, informerhub.WatchRequest{})
	// Both informers watch before the changes: one whose first watch the
	// fake refused would list them again, as a relist's batch, whose
	// tokens only the hub that made them continues.
	c.cms().Add(configMap("ns", "first", nil, ""))
	nextChange(t, theirs)
	nextChange(t, ours)
	const n = 100
	for i := range n {
		c.cms().Add(configMap("ns", fmt.Sprint(i), nil, ""))
	}
	token := nextChange(t, theirs).ResumeToken // after ns/0, of another replica
	nextChange(t, ours)
	informerhub.WaitForResourceVersion(h, configMaps, n+1)
	informerhub.ApplyRetention(h)
	_, last := informerhub.DiskWindow(h, configMaps)
	store.beforeSearch = func() {
		if err := informerhub.CutDisk(h, configMaps, last+1); err != nil {
			t.Error(err)
		}
	}
	resumed := watch(t, h, informerhub.WatchRequest{ResumeToken: token})
	for i := 1; i < n; i++ {
		e := nextChange(t, resumed)
		if want := fmt.Sprintf("ns/%d", i); keyOf(t, e.Object) != want || e.Type != informerhub.EventAdded {
			t.Fatalf("change %d after the token: %v %s, want the ADDED of %s", i, e.Type, keyOf(t, e.Object), want)
		}
	}
	if st := statsOf(t, h); st.Replays != 1 || st.ExpiredTokens != 0 {
		t.Errorf("Replays %d, ExpiredTokens %d: want the cut replayed once, nothing expired", st.Replays, st.ExpiredTokens)
	}
}

// racingStore runs beforeRead before each read of records, on the reading
// goroutine: a test cuts the disk there, as retention may between the
// feed placing a subscriber on the disk and its read.
type racingStore struct {
	*historystore.Store
	beforeRead, beforeSearch func()
}

func (s *racingStore) LastAtOrBefore(resource string, first, last, rv uint64) (uint64, error) {
	if s.beforeSearch != nil {
		s.beforeSearch()
	}
	return s.Store.LastAtOrBefore(resource, first, last, rv)
}

func (s *racingStore) Read(resource string, t value.Transformer, seq, to uint64, max, maxBytes int) ([]historystore.Record, error) {
	if s.beforeRead != nil {
		s.beforeRead()
	}
	return s.Store.Read(resource, t, seq, to, max, maxBytes)
}

// faultyStore stalls or fails the writes of a real store on demand.
type faultyStore struct {
	*historystore.Store
	mu      sync.Mutex
	gate    chan struct{}   // when set, writes wait until it is closed
	waiting chan struct{}   // closed when a write waits for gate
	failing map[string]bool // the resource types whose writes fail
}

// stall makes writes wait until the returned function is called, or the
// test ends.
func (s *faultyStore) stall(t *testing.T) (release func()) {
	gate := make(chan struct{})
	s.mu.Lock()
	s.gate, s.waiting = gate, make(chan struct{})
	s.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			s.mu.Lock()
			s.gate = nil
			s.mu.Unlock()
			close(gate)
		})
	}
	t.Cleanup(release)
	return release
}

// writerStuck returns a channel closed once a write waits for the stall:
// from then on the writer writes nothing, and catches up with nothing,
// until it is released.
func (s *faultyStore) writerStuck() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

func (s *faultyStore) fail(resource string, failing bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing == nil {
		s.failing = map[string]bool{}
	}
	s.failing[resource] = failing
}

func (s *faultyStore) Append(resource string, t value.Transformer, w historystore.Write) error {
	s.mu.Lock()
	gate, failing := s.gate, s.failing[resource]
	if gate != nil && s.waiting != nil {
		close(s.waiting)
		s.waiting = nil
	}
	s.mu.Unlock()
	if failing {
		return errors.New("injected: cannot write " + resource)
	}
	if gate != nil {
		<-gate
	}
	return s.Store.Append(resource, t, w)
}

// changeKeys is the type and object key of each change, for comparing
// events from the API server with events sent live.
func changeKeys(t *testing.T, events []sent) []string {
	t.Helper()
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = fmt.Sprintf("%v %s %s", e.Type, keyOf(t, e.Object), e.ResourceVersion)
	}
	return out
}

// TestAStalledDiskSpillsAndStartsOver checks that while the disk stalls,
// what a resource type's changes waiting for it hold stays bounded: past
// HistoryMaxUnwrittenBytes the type stops writing and its history evicts as
// without a disk, the live stream going on; once the writer catches up, the
// type's disk history starts over and resumes across a restart; and a token
// from before the gap is replayed from the API server, exactly.
func TestAStalledDiskSpillsAndStartsOver(t *testing.T) {
	sp := spill(t, 200)
	c, cfg, h, s, before, live, n := sp.c, sp.cfg, sp.h, sp.s, sp.before, sp.live, len(sp.live)
	if l := informerhub.HistoryLen(h, configMaps); l > 10 {
		t.Errorf("the history holds %d changes while the disk stalls, want HistorySize (10) at most", l)
	}
	if st := statsOf(t, h); st.DiskSpills != 1 {
		t.Errorf("DiskSpills = %d, want 1", st.DiskSpills)
	}

	sp.release()
	informerhub.ApplyRetention(h) // the writer caught up: the type starts over
	if !informerhub.OnDisk(h, configMaps) {
		t.Fatal("the feed does not write to the disk again once the writer caught up")
	}
	c.cms().Add(configMap("ns", "after", nil, ""))
	after := nextChange(t, s).ResumeToken
	informerhub.ApplyRetention(h)
	h.Close()

	// A restart resumes from the new disk history, exactly.
	h2 := newHub(t, c, cfg)
	resumed := watch(t, h2, informerhub.WatchRequest{ResumeToken: after})
	c.cms().Add(configMap("ns", "restarted", nil, ""))
	if e := nextChange(t, resumed); keyOf(t, e.Object) != "ns/restarted" || e.FromRelist {
		t.Fatalf("resumed after a restart: %v %s FromRelist=%v, want the exact ADDED of ns/restarted", e.Type, keyOf(t, e.Object), e.FromRelist)
	}
	// A token from before the gap: neither memory nor disk holds what
	// follows it; the API server replays it.
	old := watch(t, h2, informerhub.WatchRequest{ResumeToken: before})
	if diff := cmp.Diff(changeKeys(t, live), changeKeys(t, nextSent(t, old, n))); diff != "" {
		t.Errorf("resumed from before the gap (-live +resumed):\n%s", diff)
	}
	if st := statsOf(t, h2); st.Replays != 1 {
		t.Errorf("Replays = %d, want the token from before the gap replayed", st.Replays)
	}
}

// TestAFailingTypeSpillsAlone checks that a resource type whose writes fail
// stops writing alone, the others writing on, and that its disk history
// starts over once it can be written again.
func TestAFailingTypeSpillsAlone(t *testing.T) {
	c := newFakeCluster(t)
	store := &faultyStore{Store: openStore(t, t.TempDir())}
	h := newHub(t, c, informerhub.Config{HistoryStore: store})
	informerhub.RetryDiskAtOnce(h)
	cms, pods := watch(t, h, informerhub.WatchRequest{}), watch(t, h, informerhub.WatchRequest{Selector: informerhub.Selector{Resource: hubtest.Pods}})
	informerhub.ApplyRetention(h)

	store.fail("configmaps.v1", true)
	c.cms().Add(configMap("ns", "a", nil, ""))
	nextChange(t, cms)
	informerhub.ApplyRetention(h)
	if st := h.Disk(); st.Failed || st.WriteErrors == 0 {
		t.Errorf("Disk() = %+v, want a write error, and not failed", st)
	}
	if st := statsFor(t, h, configMaps); st.DiskSpills == 0 {
		t.Error("the failing type did not spill")
	}
	_, podsBefore := informerhub.DiskWindow(h, hubtest.Pods)
	c.Source(hubtest.Pods).Add(hubtest.Pod("ns", "p", nil, "node", "Running"))
	nextChange(t, pods)
	informerhub.ApplyRetention(h)
	if _, podsAfter := informerhub.DiskWindow(h, hubtest.Pods); podsAfter <= podsBefore {
		t.Errorf("pods' disk history ends at %d after a change, as before (%d): the other type stopped writing too", podsAfter, podsBefore)
	}

	store.fail("configmaps.v1", false)
	informerhub.ApplyRetention(h)
	informerhub.ApplyRetention(h)
	if !informerhub.OnDisk(h, configMaps) {
		t.Fatal("the type does not write to the disk again once it can")
	}
	c.cms().Add(configMap("ns", "b", nil, ""))
	nextChange(t, cms)
	informerhub.ApplyRetention(h)
	if first, last := informerhub.DiskWindow(h, configMaps); last < first {
		t.Errorf("configmaps' disk history is empty (%d..%d) after it started over", first, last)
	}
}

// TestAStalledDiskKeepsTheHubWithinItsMemoryBudget checks that changes
// waiting for a stalled disk, which the history cannot evict, do not take
// the hub past its memory budget: once they are all it could evict, the
// type spills.
func TestAStalledDiskKeepsTheHubWithinItsMemoryBudget(t *testing.T) {
	c := newFakeCluster(t)
	store := &faultyStore{Store: openStore(t, t.TempDir())}
	const budget = 512 << 10
	h := newHub(t, c, informerhub.Config{HistoryStore: store, MemoryBudget: budget, HistoryMaxUnwrittenBytes: 1 << 30})
	s := watch(t, h, informerhub.WatchRequest{})
	c.cms().Add(configMap("ns", "before", nil, ""))
	nextChange(t, s)
	informerhub.ApplyRetention(h)

	store.stall(t)
	for i := range 400 { // 1.6 MiB of previous states
		putBig(c, i)
		nextSent(t, s, 1)
		// The change just made may not be reclaimed for yet: the feed
		// reclaims after it has handed it out.
		if m := h.Memory(); m.History+m.Queues+m.LabelIndexes > budget+8<<10 {
			t.Fatalf("after change %d: history %d, queues %d, label indexes %d: past the budget %d", i, m.History, m.Queues, m.LabelIndexes, budget)
		}
	}
	if informerhub.OnDisk(h, configMaps) {
		t.Error("the feed still writes to the stalled disk")
	}
}

// A disk that does not hold a resource type yet (its first write comes
// with the feed's first change) reaches back nowhere: a token of another
// run older than the feed's list is replayed from the API server, and the
// change between them arrives, rather than being placed on the empty disk
// and skipped.
func TestADiskThatDoesNotHoldTheTypeYetReachesNothing(t *testing.T) {
	c := newFakeCluster(t)
	h1 := newHub(t, c, informerhub.Config{})
	s := watch(t, h1, informerhub.WatchRequest{})
	c.cms().Add(configMap("ns", "a", nil, "1"))
	token := nextChange(t, s).ResumeToken
	s.Close()
	h1.Close()
	c.cms().Modify(configMap("ns", "a", nil, "2"))

	h2 := newHub(t, c, informerhub.Config{HistoryStore: openStore(t, t.TempDir())})
	s = watch(t, h2, informerhub.WatchRequest{ResumeToken: token})
	if e := nextChange(t, s); e.Type != informerhub.EventModified || !strings.Contains(e.Object, `"v":"2"`) {
		t.Errorf("resumed: %v %s, want the MODIFIED made after the token", e.Type, e.Object)
	}
}

// TestASpilledTypeWhoseFeedStoppedKeepsItsDiskHistory checks that a type
// whose feed stopped before its disk history started over keeps what the
// disk holds: the next feed continues it from its end, the API server
// filling in what was not written, so a token from before the spill
// resumes from the disk, exactly, without a replay.
func TestASpilledTypeWhoseFeedStoppedKeepsItsDiskHistory(t *testing.T) {
	sp := spill(t, 100)
	c, store, h, before, live := sp.c, sp.store, sp.h, sp.before, sp.live
	stopped := informerhub.Stopped(h, configMaps)
	closed := make(chan struct{})
	go func() {
		h.Close() // its feed stops; the writer, stalled, writes what is left
		close(closed)
	}()
	// Released before the feed stopped, the writer would catch up with a
	// feed still running, and start its disk history over: another case.
	await(t, stopped, "the closing hub's feed stopped")
	sp.release()
	<-closed

	h2 := newHub(t, c, informerhub.Config{HistoryStore: store}) // room for the changes it fetches
	resumed := watch(t, h2, informerhub.WatchRequest{ResumeToken: before})
	got := nextSent(t, resumed, len(live))
	if diff := cmp.Diff(changeKeys(t, live), changeKeys(t, got)); diff != "" {
		t.Errorf("resumed from before the spill (-live +resumed):\n%s", diff)
	}
	for _, e := range got {
		if e.FromRelist {
			t.Fatalf("%v %s is marked FromRelist: the API server had every change", e.Type, keyOf(t, e.Object))
		}
	}
	if st := statsOf(t, h2); st.Replays != 0 {
		t.Errorf("Replays = %d: the disk history was dropped, not continued", st.Replays)
	}
}

// spilling is a hub whose ConfigMaps spilled: its disk stalled, and n
// changes of 4 KiB went past HistoryMaxUnwrittenBytes (64 KiB).
type spilling struct {
	c       *fakeCluster
	store   *faultyStore
	cfg     informerhub.Config
	h       *informerhub.Hub
	s       *informerhub.Subscription // live, has read every change
	before  string                    // a token from before the stall
	live    []sent                    // the n changes, as s read them
	release func()                    // ends the stall
}

func spill(t *testing.T, n int) spilling {
	t.Helper()
	sp := spilling{c: newFakeCluster(t), store: &faultyStore{Store: openStore(t, t.TempDir())}}
	sp.cfg = informerhub.Config{HistoryStore: sp.store, HistorySize: 10, HistoryMaxUnwrittenBytes: 64 << 10}
	sp.h = newHub(t, sp.c, sp.cfg)
	sp.s = watch(t, sp.h, informerhub.WatchRequest{})
	sp.c.cms().Add(configMap("ns", "before", nil, ""))
	sp.before = nextChange(t, sp.s).ResumeToken
	informerhub.ApplyRetention(sp.h)

	sp.release = sp.store.stall(t)
	stuck := sp.store.writerStuck()
	for i := range n { // the live stream, which keeps up, goes on
		putBig(sp.c, i)
		sp.live = append(sp.live, nextSent(t, sp.s, 1)...)
		if i == 0 {
			// The writer is stuck on the disk before the changes pile up,
			// as on a disk that stalls: one that was merely slow to wake
			// would catch up with nothing at the spill, and start the
			// type over at once.
			await(t, stuck, "a write is stuck on the stalled disk")
		}
	}
	if informerhub.OnDisk(sp.h, configMaps) {
		t.Fatal("the feed still writes to a disk that stalled past HistoryMaxUnwrittenBytes")
	}
	return sp
}

// TestAHugeRelistAgainstAStalledDiskSpills checks that a relist whose
// changes alone go past HistoryMaxUnwrittenBytes while the disk stalls
// spills its type at once, as a live change would.
func TestAHugeRelistAgainstAStalledDiskSpills(t *testing.T) {
	c := newFakeCluster(t)
	store := &faultyStore{Store: openStore(t, t.TempDir())}
	h := newHub(t, c, informerhub.Config{HistoryStore: store, HistoryMaxUnwrittenBytes: 64 << 10})
	s := watch(t, h, informerhub.WatchRequest{})
	const objects = 30
	for i := range objects {
		c.cms().Add(configMap("ns", fmt.Sprint(i), nil, bigData))
		nextChange(t, s)
	}
	informerhub.ApplyRetention(h)
	store.stall(t)
	// Every object changes while the hub's watch is away, and the API
	// server forgets: the hub relists 30 changes, each replacing 4 KiB.
	for i := range objects {
		c.cms().ModifyDropWatch(configMap("ns", fmt.Sprint(i), nil, "changed"+bigData))
	}
	c.Compact(configMaps)
	c.cms().ResetWatch()
	nextSent(t, s, objects)
	// (Whether it writes again by now depends on whether the writer was
	// behind when it spilled: not asserted.)
	if st := statsOf(t, h); st.DiskSpills != 1 || st.Relists != 1 {
		t.Errorf("DiskSpills %d, Relists %d: want the relist to have spilled; stats %+v", st.DiskSpills, st.Relists, st)
	}
}

// TestACatchUpFromDiskSendsBookmarks: a subscriber that catches up from
// the disk history and selects none of it is as quiet as a live one with
// nothing to send, and gets bookmarks as one does, at the position it has
// read up to: its token stays fresh however long the reading takes.
func TestACatchUpFromDiskSendsBookmarks(t *testing.T) {
	c := newFakeCluster(t)
	h := newHub(t, c, informerhub.Config{HistoryStore: openStore(t, t.TempDir()), HistorySize: 10, BookmarkInterval: 20 * time.Millisecond})
	s := watch(t, h, informerhub.WatchRequest{})
	c.cms().Add(configMap("ns", "first", nil, ""))
	token := nextChange(t, s).ResumeToken
	const n = 600 // a few batches
	for i := range n {
		c.cms().Add(configMap("ns", fmt.Sprint(i), nil, ""))
	}
	informerhub.WaitForResourceVersion(h, configMaps, n+1)
	informerhub.ApplyRetention(h) // the writer has caught up
	none := informerhub.Selector{Resource: configMaps, Namespace: "none"}
	quiet := watch(t, h, informerhub.WatchRequest{Selector: none, ResumeToken: token})
	// A disk slower than the bookmark interval: its first batch takes as
	// long as a quiet live stream, opened after, takes to get three
	// bookmarks, that is three intervals at least.
	witness := watch(t, h, informerhub.WatchRequest{Selector: none})
	var slow sync.Once
	informerhub.OnDiskRead(h, func() {
		slow.Do(func() {
			for range 3 {
				if e := next(t, witness); e.Type != informerhub.EventBookmark {
					t.Fatalf("the witness got %v, want a bookmark", e.Type)
				}
			}
		})
	})
	e := next(t, quiet)
	if e.Type != informerhub.EventBookmark {
		t.Fatalf("the catch-up's first event is %v, want a bookmark", e.Type)
	}
	if rv, _ := strconv.Atoi(e.ResourceVersion); rv <= 1 || rv >= n+1 {
		t.Fatalf("the catch-up's bookmark is at resourceVersion %s, want one inside the history it reads, after the token's (1) and before the feed's (%d)", e.ResourceVersion, n+1)
	}
	// Its token resumes exactly from there.
	resumed := watch(t, h, informerhub.WatchRequest{ResumeToken: e.ResumeToken})
	if got := nextChange(t, resumed); got.ResourceVersion != strconv.Itoa(mustAtoi(t, e.ResourceVersion)+1) {
		t.Errorf("resumed from the bookmark at %s: first change at %s, want the next version", e.ResourceVersion, got.ResourceVersion)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
