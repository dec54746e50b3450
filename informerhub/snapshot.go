package informerhub

import (
	"strconv"
	"sync"

	"github.com/informerhub/informerhub/informerhub/projection"
)

// Snapshot is the matching objects of one point in time. Its methods must be
// called from one goroutine at a time.
type Snapshot struct {
	entry           *feedEntry
	feed            *feed
	proj            *projection.Projection // nil: whole objects
	cursor          *stateCursor
	resumeToken     string
	resourceVersion string
	closeOnce       sync.Once
}

// newSnapshot clones the state of the entry's feed for sel.
func newSnapshot(entry *feedEntry, sel *selector, proj *projection.Projection) (*Snapshot, error) {
	f := entry.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	if err := f.admission.refusedError(sel); err != nil {
		return nil, err
	}
	tree, _ := f.store.cloneFor(sel)
	pos := f.store.pos
	return &Snapshot{
		entry:           entry,
		feed:            f,
		proj:            proj,
		cursor:          newStateCursor(tree, sel),
		resumeToken:     f.events.token(token{pos: pos}),
		resourceVersion: strconv.FormatUint(pos.rv, 10),
	}, nil
}

// ResumeToken is the snapshot's point in time: watching from it yields
// exactly the changes after the snapshot.
func (s *Snapshot) ResumeToken() string { return s.resumeToken }

// ResourceVersion is the Kubernetes resourceVersion of the snapshot.
func (s *Snapshot) ResourceVersion() string { return s.resourceVersion }

// NextPage returns the next page of objects as JSON, and whether it is the
// last. A page holds at most SnapshotPageSize objects and, unless it holds
// one, at most SnapshotPageBytes bytes of them. It fails only when the
// selector's filter exceeded its cost on an object (a *RequestError on
// selector.filter; see feed.tripLocked).
func (s *Snapshot) NextPage() (objects []string, last bool, err error) {
	cfg := &s.feed.hub.cfg
	size := 0
	for len(objects) < cfg.SnapshotPageSize {
		o := s.cursor.peek()
		if o == nil || len(objects) > 0 && size+len(o.json) > cfg.SnapshotPageBytes {
			break
		}
		s.cursor.next()
		json := o.json
		if s.proj != nil {
			if projected, err := s.proj.Apply(o.jsonBytes()); err == nil {
				json = string(projected)
			}
		}
		objects = append(objects, json)
		size += len(json)
	}
	more := s.cursor.more()
	if s.cursor.costly() {
		f := s.feed
		f.mu.Lock()
		defer f.mu.Unlock()
		f.tripLocked(s.cursor.eval.costly, s.cursor.sel)
		return nil, false, f.admission.refusedError(s.cursor.sel)
	}
	return objects, !more, nil
}

// Close releases the snapshot's informer.
func (s *Snapshot) Close() {
	s.closeOnce.Do(func() { s.feed.hub.feeds.release(s.entry) })
}
