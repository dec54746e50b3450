package feed

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// What the hub's tests observe of a feed, each under its lock: the core's
// promises are tested through the hub, and these let a test see the state
// that makes them hold (its index, its queues, its history) without
// reaching into the feed's fields.

// Lookup returns the running feed of gvr; nil without one.
func (fs *Feeds) Lookup(gvr schema.GroupVersionResource) *Feed {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if e := fs.entries[gvr]; e != nil {
		return e.feed
	}
	return nil
}

// Retained reports whether Config.Retain's retainer holds gvr's feed.
func (fs *Feeds) Retained(gvr schema.GroupVersionResource) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	e := fs.entries[gvr]
	return e != nil && e.retained > 0
}

// IdleTimerArmed reports whether gvr's feed will stop for idleness unless
// acquired again.
func (fs *Feeds) IdleTimerArmed(gvr schema.GroupVersionResource) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	e := fs.entries[gvr]
	return e != nil && e.idleTimer != nil
}

// LiveSubscribers counts the feed's live subscribers.
func (f *Feed) LiveSubscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.live.SubscriberCount()
}

// DispatchVisits counts the subscriber groups the feed has matched changes
// against, and the groups it has now.
func (f *Feed) DispatchVisits() (visits uint64, groups int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.live.VisitCount(), f.live.GroupCount()
}

// WaitForVersion waits until the feed has taken every change up to rv: its
// live subscribers then hold all of theirs in their queues.
func (f *Feed) WaitForVersion(rv uint64) {
	for {
		f.mu.Lock()
		if f.store.pos.RV >= rv {
			f.mu.Unlock()
			return
		}
		advanced := f.store.advancedCh()
		f.mu.Unlock()
		<-advanced
	}
}

// PrepareDeltas does for deltas what the informer's handler does before
// taking the feed's lock, and returns what it does under the lock.
func (f *Feed) PrepareDeltas(deltas cache.Deltas) (apply func() error) {
	prepared := f.prepare(deltas)
	return func() error { return f.apply(deltas, prepared) }
}

// ProbeLock takes and releases the feed's lock once, and returns how long
// it waited for it.
func (f *Feed) ProbeLock() time.Duration {
	start := time.Now()
	f.mu.Lock()
	waited := time.Since(start)
	f.mu.Unlock()
	return waited
}

// IndexedLabelKeys returns the label keys the feed has indexed, sorted.
func (f *Feed) IndexedLabelKeys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []string
	for k := range f.store.index.keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// CheckLabelIndex reports where the feed's label index differs from its
// state: each indexed value's tree must hold exactly the state's objects
// with that label, and no tree may be empty.
func (f *Feed) CheckLabelIndex() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for key, values := range f.store.index.keys {
		want := map[string][]*state.Object{}
		f.store.state.Ascend(func(o *state.Object) bool {
			if v, ok := o.Labels[key]; ok {
				want[v] = append(want[v], o)
			}
			return true
		})
		if len(want) != len(values) {
			return fmt.Errorf("key %q: %d values indexed, the state has %d", key, len(values), len(want))
		}
		for v, t := range values {
			var got []*state.Object
			t.Ascend(func(o *state.Object) bool {
				got = append(got, o)
				return true
			})
			if !slices.Equal(got, want[v]) {
				return fmt.Errorf("key %q value %q: %d objects indexed, the state has %d (or others)", key, v, len(got), len(want[v]))
			}
		}
	}
	return nil
}

// HistoryLen counts the records the feed's history holds in memory.
func (f *Feed) HistoryLen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.store.history.Len()
}

// ViewSlots counts the slots of views other than the default one that the
// records of the feed's history hold, and the most any record holds.
func (f *Feed) ViewSlots() (total, most int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for seq := f.store.history.First; seq <= f.store.history.Last; seq++ {
		if r, ok := f.store.history.Get(seq); ok {
			if slots := r.ViewEvents.Load(); slots != nil {
				total += len(*slots)
				most = max(most, len(*slots))
			}
		}
	}
	return total, most
}

// WritesToDisk reports whether the feed writes its history to the disk.
func (f *Feed) WritesToDisk() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.store.disk.log != nil
}
