package informerhub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/digest"
)

// held is what a client holds of a selection: the objects its events
// leave, by namespace/name.
type held map[string]metav1.ObjectMeta

func (h held) apply(t *testing.T, e *informerhub.Event) {
	t.Helper()
	var obj struct{ Metadata metav1.ObjectMeta }
	if err := json.Unmarshal([]byte(e.Object), &obj); err != nil {
		t.Fatal(err)
	}
	key := obj.Metadata.Namespace + "/" + obj.Metadata.Name
	if e.Type == informerhub.EventDeleted {
		delete(h, key)
	} else {
		h[key] = obj.Metadata
	}
}

// digest is what the client computes of what it holds.
func (h held) digest() (string, uint64) {
	var s digest.Set
	for _, m := range h {
		s.Add(digest.Of(m.Namespace, m.Name, string(m.UID), m.ResourceVersion))
	}
	return s.String(), s.Count()
}

// TestTheDigestAtATokenIsWhatItsClientHolds: for selections by namespace,
// labels and a filter, the Digest at every token a subscriber received
// equals the digest of what the subscriber holds there; objects that
// enter and leave a selection by their labels included.
func TestTheDigestAtATokenIsWhatItsClientHolds(t *testing.T) {
	for _, sel := range []informerhub.Selector{
		{Resource: configMaps},
		{Resource: configMaps, Namespace: "a"},
		{Resource: configMaps, LabelSelector: "team=x"},
		{Resource: configMaps, Filter: `object.data.v != "v3"`},
	} {
		t.Run(fmt.Sprintf("%+v", sel), func(t *testing.T) {
			c := newFakeCluster(t)
			for i := range 6 {
				c.cms().Add(configMap([]string{"a", "b"}[i%2], fmt.Sprint("obj-", i), map[string]string{"team": []string{"x", "y"}[i%3%2]}, "v0"))
			}
			h := newHub(t, c, informerhub.Config{})
			s := watch(t, h, informerhub.WatchRequest{Selector: sel, SendInitialEvents: true})
			type point struct {
				token, digest string
				count         uint64
			}
			var points []point
			client := held{}
			for i := range 24 {
				obj := configMap([]string{"a", "b"}[i%2], fmt.Sprint("obj-", i%8), map[string]string{"team": []string{"x", "y"}[i%3%2]}, fmt.Sprint("v", i%5))
				switch i % 6 {
				case 5:
					c.cms().Delete(obj)
				case 0, 3:
					c.cms().Add(obj)
				default:
					c.cms().Modify(obj)
				}
			}
			c.cms().Add(configMap("a", "marker", map[string]string{"team": "x"}, "end"))
			for {
				e := next(t, s)
				if e.Type != informerhub.EventBookmark {
					client.apply(t, e)
				}
				if e.Type == informerhub.EventBookmark && !e.InitialEventsEnd {
					continue
				}
				d, n := client.digest()
				points = append(points, point{e.ResumeToken, d, n})
				if _, ok := client["a/marker"]; ok {
					break
				}
			}
			for i, p := range points {
				got, err := h.Digest(context.Background(), informerhub.DigestRequest{Selector: sel, ResumeToken: p.token})
				if err != nil {
					t.Fatalf("Digest at point %d: %v", i, err)
				}
				if got.Digest != p.digest || got.Count != p.count || got.Moved {
					t.Errorf("Digest at point %d: %s (%d objects, moved %v); the client holds %s (%d)", i, got.Digest, got.Count, got.Moved, p.digest, p.count)
				}
			}
			now, err := h.Digest(context.Background(), informerhub.DigestRequest{Selector: sel})
			last := points[len(points)-1]
			if err != nil || now.Digest != last.digest || now.Count != last.count {
				t.Errorf("Digest now: %+v, %v; the client holds %s (%d)", now, err, last.digest, last.count)
			}
			// Its token continues exactly after what it digested: nothing
			// changed since, so a Watch from it has nothing to send.
			if now.ResumeToken == "" || now.ResourceVersion == "" {
				t.Errorf("Digest now has no position: %+v", now)
			}
		})
	}
}

// TestADigestOfAPositionTheHistoryNoLongerHoldsSaysItMoved: the hub
// answers with the current position, marked moved, never a digest of
// another position under the asked one.
func TestADigestOfAPositionTheHistoryNoLongerHoldsSaysItMoved(t *testing.T) {
	c := newFakeCluster(t)
	c.cms().Add(configMap("a", "first", nil, "v0"))
	h := newHub(t, c, informerhub.Config{HistorySize: 4})
	sel := informerhub.Selector{Resource: configMaps}
	snap, err := h.Snapshot(context.Background(), informerhub.SnapshotRequest{Selector: sel})
	if err != nil {
		t.Fatal(err)
	}
	old := snap.ResumeToken()
	snap.Close()
	for i := range 10 {
		c.cms().Modify(configMap("a", "first", nil, fmt.Sprint("v", i+1)))
	}
	waitForData(t, h, "v10")
	got, err := h.Digest(context.Background(), informerhub.DigestRequest{Selector: sel, ResumeToken: old})
	if err != nil {
		t.Fatal(err)
	}
	now, err := h.Digest(context.Background(), informerhub.DigestRequest{Selector: sel})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Moved || got.ResourceVersion != now.ResourceVersion || got.Digest != now.Digest || got.ResumeToken != now.ResumeToken {
		t.Errorf("Digest of a token the history no longer holds: %+v; want the current position's, moved (%+v)", got, now)
	}
}

// waitForData waits until the hub has a ConfigMap with data v:
// watching from now, with initial events, again if the watch falls
// behind the small history.
func waitForData(t *testing.T, h *informerhub.Hub, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		s, err := h.Watch(ctx, informerhub.WatchRequest{Selector: informerhub.Selector{Resource: configMaps}, SendInitialEvents: true})
		if err != nil {
			t.Fatal(err)
		}
		for {
			e, err := s.Next(ctx)
			if ctx.Err() != nil {
				t.Fatalf("the hub never had data %s", v)
			}
			if err != nil {
				break // fell behind: watch again
			}
			var cm struct{ Data map[string]string }
			if e.Object != "" && json.Unmarshal([]byte(e.Object), &cm) == nil && cm.Data["v"] == v {
				s.Close()
				return
			}
		}
		s.Close()
	}
}

// TestADigestAtAnInitialEventsTokenContinuesThem: the Digest at a token of
// initial events holds the objects listed up to it, and its token
// continues them: a Watch from it sends the rest, then the end.
func TestADigestAtAnInitialEventsTokenContinuesThem(t *testing.T) {
	c := newFakeCluster(t)
	for _, name := range []string{"o1", "o2", "o3"} {
		c.cms().Add(configMap("a", name, nil, "v0"))
	}
	h := newHub(t, c, informerhub.Config{})
	sel := informerhub.Selector{Resource: configMaps}
	s := watch(t, h, informerhub.WatchRequest{Selector: sel, SendInitialEvents: true})
	first := next(t, s)
	d, err := h.Digest(context.Background(), informerhub.DigestRequest{Selector: sel, ResumeToken: first.ResumeToken})
	if err != nil || d.Count != 1 || d.Moved {
		t.Fatalf("Digest at the first initial event: %+v, %v; want one object", d, err)
	}
	rest := watch(t, h, informerhub.WatchRequest{Selector: sel, ResumeToken: d.ResumeToken})
	var got []string
	for {
		e := next(t, rest)
		if e.InitialEventsEnd {
			break
		}
		got = append(got, toEv(t, e).Key)
	}
	if want := []string{"a/o2", "a/o3"}; !slices.Equal(got, want) {
		t.Errorf("a Watch from the Digest's token sent %v, then the end; want %v", got, want)
	}
}

// TestAMovedDigestOfAnInitialEventsTokenIsOfTheWholeState: once the
// history no longer holds an initial-events token's position, the Digest
// is of the current position, all of it: what the client holds once it
// has caught up.
func TestAMovedDigestOfAnInitialEventsTokenIsOfTheWholeState(t *testing.T) {
	c := newFakeCluster(t)
	for _, name := range []string{"o1", "o2", "o3"} {
		c.cms().Add(configMap("a", name, nil, "v0"))
	}
	h := newHub(t, c, informerhub.Config{HistorySize: 4})
	sel := informerhub.Selector{Resource: configMaps}
	s := watch(t, h, informerhub.WatchRequest{Selector: sel, SendInitialEvents: true})
	first := next(t, s)
	s.Close()
	for i := range 10 {
		c.cms().Modify(configMap("a", "o1", nil, fmt.Sprint("v", i+1)))
	}
	waitForData(t, h, "v10")
	got, err := h.Digest(context.Background(), informerhub.DigestRequest{Selector: sel, ResumeToken: first.ResumeToken})
	if err != nil {
		t.Fatal(err)
	}
	now, err := h.Digest(context.Background(), informerhub.DigestRequest{Selector: sel})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Moved || got.Count != 3 || got.Digest != now.Digest {
		t.Errorf("moved Digest of an initial-events token: %+v; want all 3 objects now (%+v)", got, now)
	}
}
