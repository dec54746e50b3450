package main

import (
	"fmt"
	"testing"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

func heldEvent(t hubclient.EventType, name, uid, rv string) hubclient.Event {
	return hubclient.Event{Type: t, Object: fmt.Appendf(nil, `{"metadata":{"namespace":"demo","name":%q,"uid":%q,"resourceVersion":%q}}`, name, uid, rv)}
}

// TestHeldObjectsKeepTheDigestOfWhatTheyHold applies events as the SDK
// delivers them, a re-sync that lists every object among them, and
// compares the digest with the one of the objects held at the end.
func TestHeldObjectsKeepTheDigestOfWhatTheyHold(t *testing.T) {
	h := newHeldObjects()
	for _, e := range []hubclient.Event{
		heldEvent(hubclient.Added, "a", "u1", "1"),
		heldEvent(hubclient.Added, "b", "u2", "2"),
		heldEvent(hubclient.Added, "c", "u3", "3"),
		heldEvent(hubclient.Modified, "a", "u1", "4"),
		// A DELETED carries the deletion's resourceVersion, not the
		// held one.
		heldEvent(hubclient.Deleted, "b", "u2", "5"),
	} {
		if err := h.apply(e); err != nil {
			t.Fatal(err)
		}
	}
	var want hubclient.Digest
	want.Add("demo", "a", "u1", "4")
	want.Add("demo", "c", "u3", "3")
	if h.digest != want {
		t.Fatalf("after the events: %s of %d, want %s of %d", h.digest, h.digest.Count(), want, want.Count())
	}

	// A re-sync that lists every object: c is not listed, and goes at its
	// end; until then the copy is of no one position.
	resynced := heldEvent(hubclient.Added, "a", "u1", "9")
	resynced.Resync, resynced.ResyncReplaces = true, true
	if err := h.apply(resynced); err != nil {
		t.Fatal(err)
	}
	if !h.resyncing {
		t.Fatal("in the middle of a re-sync, the copy is said to be of one position")
	}
	if err := h.apply(hubclient.Event{Type: hubclient.Bookmark, Resync: true, ResyncReplaces: true}); err != nil {
		t.Fatal(err)
	}
	want = hubclient.Digest{}
	want.Add("demo", "a", "u1", "9")
	if h.resyncing || h.digest != want || len(h.objects) != 1 {
		t.Fatalf("after the re-sync: %s of %d (resyncing %v), want %s of 1", h.digest, h.digest.Count(), h.resyncing, want)
	}
	if err := h.apply(hubclient.Event{Type: hubclient.Added, Object: []byte("{")}); err == nil {
		t.Error("an object that is not JSON was applied")
	}
}
