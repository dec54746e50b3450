package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

// errMismatch ends a verify whose copy the hub's digest contradicts.
var errMismatch = errors.New("the hub's digest differs from hubctl's copy")

// heldObjects is what hubctl holds of a selection: each object's uid and
// resourceVersion, and their digest, kept up as events are applied.
type heldObjects struct {
	objects map[heldKey]heldVersion
	digest  hubclient.Digest
	// listed is, during a re-sync that lists every object
	// (ResyncReplaces), what it listed so far: the rest is dropped at its
	// end.
	listed map[heldKey]bool
	// resyncing is set between a re-sync's first event and its closing
	// bookmark: the copy is then of no one position.
	resyncing bool
}

type heldKey struct{ namespace, name string }

type heldVersion struct{ uid, resourceVersion string }

func newHeldObjects() *heldObjects { return &heldObjects{objects: map[heldKey]heldVersion{}} }

// metadataOf reads the fields the digest is over.
func metadataOf(data []byte) (heldKey, heldVersion, error) {
	var obj struct {
		Metadata struct {
			Namespace, Name, UID, ResourceVersion string
		}
	}
	if err := json.Unmarshal(data, &obj); err != nil {
		return heldKey{}, heldVersion{}, fmt.Errorf("decoding an object: %w", err)
	}
	m := obj.Metadata
	return heldKey{m.Namespace, m.Name}, heldVersion{m.UID, m.ResourceVersion}, nil
}

func (h *heldObjects) put(k heldKey, v heldVersion) {
	h.remove(k)
	h.objects[k] = v
	h.digest.Add(k.namespace, k.name, v.uid, v.resourceVersion)
}

func (h *heldObjects) remove(k heldKey) {
	if old, ok := h.objects[k]; ok {
		delete(h.objects, k)
		h.digest.Remove(k.namespace, k.name, old.uid, old.resourceVersion)
	}
}

// apply applies an event as the SDK's Watcher delivers it.
func (h *heldObjects) apply(e hubclient.Event) error {
	if e.Resync {
		h.resyncing = true
	}
	if e.ResyncReplaces && h.listed == nil {
		h.listed = map[heldKey]bool{}
	}
	switch e.Type {
	case hubclient.Added, hubclient.Modified:
		k, v, err := metadataOf(e.Object)
		if err != nil {
			return err
		}
		h.put(k, v)
		if h.listed != nil {
			h.listed[k] = true
		}
	case hubclient.Deleted:
		// The event's object carries the deletion's resourceVersion:
		// the held version is the one to take out.
		k, _, err := metadataOf(e.Object)
		if err != nil {
			return err
		}
		h.remove(k)
	case hubclient.Bookmark:
		if e.Resync { // the re-sync's end
			for k := range h.objects {
				if h.listed != nil && !h.listed[k] {
					h.remove(k)
				}
			}
			h.listed, h.resyncing = nil, false
		}
	}
	return nil
}

// verify compares a copy of sel's objects that hubctl keeps, from a
// Snapshot, with the hub's Digest at the copy's position; following, it
// keeps the copy up with a watch from the snapshot and compares again
// every interval, at the position of the last event applied.
func (c *cli) verify(ctx context.Context, sel hubclient.Selector, follow bool, interval time.Duration) error {
	held := newHeldObjects()
	var token, rv string
	for attempt := 0; ; attempt++ {
		snap, err := c.client.Snapshot(ctx, sel)
		if err != nil {
			return err
		}
		held = newHeldObjects()
		for _, o := range snap.Objects {
			k, v, err := metadataOf(o)
			if err != nil {
				return err
			}
			held.put(k, v)
		}
		token, rv = snap.ResumeToken, snap.ResourceVersion
		moved, err := c.compareDigest(ctx, sel, held, token, rv)
		if err != nil || !moved {
			if err != nil || !follow {
				return err
			}
			break
		}
		if attempt == 2 {
			return errors.New("the hub's history moved past three snapshots in a row before they could be digested: is the type changing faster than the hub keeps history? Try again")
		}
	}

	ctx, cancel := context.WithCancel(ctx) // ends the reader below
	defer cancel()
	w := c.client.Watch(ctx, sel, hubclient.WatchOptions{ResumeToken: token})
	defer w.Close()
	type next struct {
		e   hubclient.Event
		err error
	}
	events := make(chan next)
	go func() {
		for {
			e, err := w.Next()
			select {
			case events <- next{e, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	// due is set when a comparison is owed: the tick came in the middle of
	// a re-sync, or the hub no longer held the copy's position. It is made
	// after the next event, at the position that event carries, at most
	// one a second: each asks the hub for a Digest.
	due := false
	var compared time.Time
	compare := func() (err error) {
		compared = time.Now()
		due, err = c.compareDigest(ctx, sel, held, token, rv)
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case n := <-events:
			if n.err != nil {
				return n.err
			}
			if err := held.apply(n.e); err != nil {
				return err
			}
			if held.resyncing || n.e.ResumeToken == "" {
				continue
			}
			token, rv = n.e.ResumeToken, n.e.ResourceVersion
			if due && time.Since(compared) >= time.Second {
				if err := compare(); err != nil {
					return err
				}
			}
		case <-ticker.C:
			if held.resyncing {
				due = true
				continue
			}
			if err := compare(); err != nil {
				return err
			}
		}
	}
}

// compareDigest asks the hub for its digest at token and compares it with
// held's, printing the outcome; moved reports that the position is no
// longer in the hub's history, and nothing was compared.
func (c *cli) compareDigest(ctx context.Context, sel hubclient.Selector, held *heldObjects, token, rv string) (moved bool, err error) {
	hub, err := c.client.Digest(ctx, sel, token)
	if err != nil {
		return false, err
	}
	if hub.Moved && !held.digest.Matches(hub) {
		// The hub answered for its current position, which the copy has
		// not reached: nothing to compare. (A match is a proof: the copy
		// is the hub's state at that position.)
		fmt.Fprintf(c.stderr, "resourceVersion %s is no longer in the hub's history: not compared\n", rv)
		return true, nil
	}
	if !held.digest.Matches(hub) {
		fmt.Fprintf(c.stdout, "MISMATCH at resourceVersion %s: the hub has %d objects of digest %s; hubctl holds %d of digest %s\n",
			hub.ResourceVersion, hub.Count, hub.Digest, held.digest.Count(), held.digest)
		return false, errMismatch
	}
	fmt.Fprintf(c.stdout, "consistent at resourceVersion %s: %d objects, digest %s\n", hub.ResourceVersion, hub.Count, hub.Digest)
	return false, nil
}
