package informerhub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/historystore"
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
