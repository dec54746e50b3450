package informerhub

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/feed"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/internal/stream"
	"github.com/informerhub/informerhub/informerhub/internal/token"
	"github.com/informerhub/informerhub/informerhub/projection"
)

// Snapshot is the matching objects of one point in time. Its methods must be
// called from one goroutine at a time, except Close, which may end it while
// a page is being read.
type Snapshot struct {
	hub    *Hub
	entry  *feed.Entry
	feed   *feed.Feed
	proj   *projection.Projection // nil: whole objects
	cursor *stream.Cursor
	// clone is the state clone the cursor walks, counted until the last
	// page or Close (state.Clones); nil after. Atomic: Close may run while
	// a page is read.
	clone           atomic.Pointer[state.Clone]
	resumeToken     string
	resourceVersion string
	closeOnce       sync.Once
}

// newSnapshot clones the state of the entry's feed for sel.
func newSnapshot(h *Hub, entry *feed.Entry, sel *selection.Selector, proj *projection.Projection) (*Snapshot, error) {
	f := entry.Feed()
	c, err := f.CloneFor(sel)
	if err != nil {
		return nil, err
	}
	if c.Build != nil {
		c.Tree, c.Eq = f.BuildIndex(c.Build, c.Tree)
	}
	s := &Snapshot{
		hub:             h,
		entry:           entry,
		feed:            f,
		proj:            proj,
		cursor:          stream.NewCursor(c.Tree, sel, c.Eq),
		resumeToken:     f.Events().Token(token.Token{Pos: c.Pos}),
		resourceVersion: strconv.FormatUint(c.Pos.RV, 10),
	}
	s.clone.Store(c.Clone)
	return s, nil
}

// ResumeToken is the snapshot's point in time: watching from it yields
// exactly the changes after the snapshot.
func (s *Snapshot) ResumeToken() string { return s.resumeToken }

// ResourceVersion is the Kubernetes resourceVersion of the snapshot.
func (s *Snapshot) ResourceVersion() string { return s.resourceVersion }

// Page is a page of a snapshot.
type Page struct {
	// Objects are the page's objects as JSON, projected as asked.
	Objects []string
	// FilterErrors is, parallel to Objects, why the selector's filter
	// could not decide on each ("" where it decided; see
	// Event.FilterError); nil when it decided on every one.
	FilterErrors []string
	// Last is set on the last page, which may be empty.
	Last bool
}

// maxPresizedPage bounds the objects a page has room for from its first (a
// string header each): a SnapshotPageSize set far above the default
// allocates no more than this for a page that ends up holding a few, as
// SnapshotPageBytes may make it.
const maxPresizedPage = 1024

// NextPage returns the next page. A page holds at most SnapshotPageSize
// objects and, unless it holds one, at most SnapshotPageBytes bytes of
// them. It scans the state a batch at a time (see stream.Cursor.Fill), and
// fails with ctx's error if ctx ends in between: a selective filter over
// a large state takes as long as the caller waits, not longer. It fails
// with an *ObjectError on an object it cannot project.
func (s *Snapshot) NextPage(ctx context.Context) (Page, error) {
	cfg := &s.hub.cfg
	var page Page
	size := 0
	for len(page.Objects) < cfg.SnapshotPageSize {
		o := s.cursor.Peek()
		if o == nil {
			if s.cursor.Finished() {
				page.Last = true
				break
			}
			if err := ctx.Err(); err != nil {
				return Page{}, err
			}
			if err := s.clone.Load().Err(); err != nil {
				return Page{}, err
			}
			// The rest of the page at once: over an index tree, one search
			// of the tree a page rather than one a stream.CursorBatch.
			s.cursor.Fill(cfg.SnapshotPageSize - len(page.Objects))
			continue
		}
		if len(page.Objects) > 0 && size+len(o.JSON) > cfg.SnapshotPageBytes {
			break
		}
		if page.Objects == nil {
			// Room for the page from its first object: grown as it
			// fills, a page of 500 would be copied nine times.
			page.Objects = make([]string, 0, min(cfg.SnapshotPageSize, maxPresizedPage, s.cursor.MaxLeft()))
		}
		sel := s.cursor.Take()
		json := o.JSON
		if s.proj != nil {
			projected, err := s.proj.Apply(o.JSONBytes())
			if err != nil {
				return Page{}, event.Failure(s.feed.Events().Failed(&Event{}, o, fmt.Errorf("projecting it: %w", err)))
			}
			json = string(projected)
		}
		if sel.Undecided != nil && page.FilterErrors == nil {
			page.FilterErrors = make([]string, len(page.Objects), cap(page.Objects))
		}
		if page.FilterErrors != nil {
			reason := ""
			if sel.Undecided != nil {
				reason = sel.Undecided.Reason
			}
			page.FilterErrors = append(page.FilterErrors, reason)
		}
		page.Objects = append(page.Objects, json)
		size += len(json)
	}
	if !page.Last {
		page.Last = s.cursor.Finished()
	}
	if page.Last {
		s.closeClone()
	}
	return page, nil
}

// closeClone stops counting the snapshot's clone: it has been read, or the
// snapshot closed.
func (s *Snapshot) closeClone() {
	c := s.clone.Swap(nil)
	if c == nil {
		return
	}
	s.feed.CloseClone(c)
}

// Close releases the snapshot's informer.
func (s *Snapshot) Close() {
	s.closeOnce.Do(func() {
		s.closeClone()
		s.hub.feeds.Release(s.entry)
	})
}
