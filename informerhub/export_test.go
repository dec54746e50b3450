package informerhub

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub/internal/feed"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/internal/stream"
	"github.com/informerhub/informerhub/informerhub/internal/token"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// ForgeToken makes a resume token at any position, for tests of the cases a
// client cannot produce on demand, such as tokens of other feed instances.
func ForgeToken(resource string, epoch, seq, rv uint64, offset uint32) string {
	return (&token.Token{Resource: resource, Pos: state.Position{Epoch: epoch, Seq: seq, RV: rv, Offset: offset}}).Encode()
}

// LiveSubscribers counts the live subscribers of a resource's feed.
func LiveSubscribers(h *Hub, gvr schema.GroupVersionResource) int {
	f := feedOf(h, gvr)
	if f == nil {
		return 0
	}
	return f.LiveSubscribers()
}

// PanicInProcess makes the informer handler of a resource's feed panic, as
// a bug in it would, and returns what the handler returned.
func PanicInProcess(h *Hub, gvr schema.GroupVersionResource) error {
	return feedOf(h, gvr).Process(cache.Deltas{{Type: cache.Updated, Object: (*upstream.Object)(nil)}}, false)
}

// PanicWhenStopping makes the stopping of a feed after a panic panic too,
// as a feed whose state the first panic broke might.
func PanicWhenStopping(h *Hub) { h.feedDeps.StopHook = func() { panic("stopping a broken feed") } }

// Replaying reports whether a subscription still reads its replay's
// upstream watch. Call it only between calls of Next.
func Replaying(s *Subscription) bool { return s.st.Replaying() }

// The label index's limits; see index.go.
const (
	LabelIndexMinObjects = feed.LabelIndexMinObjects
	MaxLabelIndexKeys    = feed.MaxLabelIndexKeys
)

// CursorBatch is what a snapshot's cursor scans for at least at once; see
// stream.Cursor.Fill.
const CursorBatch = stream.CursorBatch

// SnapshotExamined counts the objects a snapshot has tested against its
// selector so far: all of the state's when it scans, fewer when it reads a
// label index.
func SnapshotExamined(s *Snapshot) int { return s.cursor.Examined() }

// InitialEventsExamined is SnapshotExamined for a subscription's initial
// events. Call it only between calls of Next, before the initial events end.
func InitialEventsExamined(s *Subscription) int { return s.st.InitialEventsExamined() }

// IndexedLabelKeys returns the label keys a resource's feed has indexed,
// sorted.
func IndexedLabelKeys(h *Hub, gvr schema.GroupVersionResource) []string {
	return feedOf(h, gvr).IndexedLabelKeys()
}

// CheckLabelIndex reports where the label index of a resource's feed
// differs from its state: each indexed value's tree must hold exactly the
// state's objects with that label, and no tree may be empty.
func CheckLabelIndex(h *Hub, gvr schema.GroupVersionResource) error {
	return feedOf(h, gvr).CheckLabelIndex()
}

func feedOf(h *Hub, gvr schema.GroupVersionResource) *feed.Feed { return h.feeds.Lookup(gvr) }

// WaitForResourceVersion waits until a resource's feed has taken every
// change up to rv: its live subscribers then hold all of theirs in their
// queues.
func WaitForResourceVersion(h *Hub, gvr schema.GroupVersionResource, rv uint64) {
	feedOf(h, gvr).WaitForVersion(rv)
}

// Pending counts the deliveries waiting in a live subscription's queue.
func Pending(s *Subscription) int { return s.st.Pending() }

// DispatchVisits counts the subscriber groups a resource's feed has matched
// changes against, and the groups it has now.
func DispatchVisits(h *Hub, gvr schema.GroupVersionResource) (visits uint64, groups int) {
	return feedOf(h, gvr).DispatchVisits()
}

// FilterDecodes counts the objects the hub decoded for filters.
func FilterDecodes(h *Hub) uint64 { return h.filters.Counts().Decodes }

// ReplayStateBytes is what a hub's stateful replays hold of their budget.
func ReplayStateBytes(h *Hub) int64 { return h.replays.StateBytes() }

// MaxViewSlots returns the most view event slots any record of a
// resource's history has.
func MaxViewSlots(h *Hub, gvr schema.GroupVersionResource) int {
	_, most := feedOf(h, gvr).ViewSlots()
	return most
}

// FilterEvaluations counts the hub's evaluations of filters.
func FilterEvaluations(h *Hub) uint64 { return h.filters.Counts().Evaluations }

// SettleMemory waits for an eviction for the memory budget under way, and
// evicts what the budget still requires: afterwards the hub is within it,
// or every history is down to its newest change.
func SettleMemory(h *Hub) {
	// A feed may still hold its lock, finishing the change a subscriber
	// has already received; eviction skips a busy feed, so wait for each
	// to finish first.
	for _, f := range h.feeds.Running() {
		f.ProbeLock()
	}
	h.memory.Settle()
}

// ApplyRetention makes the hub's disk history write what it holds and
// apply its retention now, and waits until it has.
func ApplyRetention(h *Hub) {
	h.disk.RetainNow()
}

// DiskWindow returns the oldest and newest record a resource type's disk
// history holds.
func DiskWindow(h *Hub, gvr schema.GroupVersionResource) (first, last uint64) {
	dl, err := h.disk.Log(upstream.FormatResource(gvr))
	if err != nil {
		panic(err)
	}
	first, last, _, _, _ = dl.Window()
	return first, last
}

// WaitRetained waits until Config.Retain's retainer holds the resource
// type's feed, checking every millisecond: the retainer starts on its own
// goroutine, with nothing to wait on.
func WaitRetained(ctx context.Context, h *Hub, gvr schema.GroupVersionResource) error {
	for !h.feeds.Retained(gvr) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// IdleTimerArmed reports whether the resource type's feed will stop for
// idleness unless acquired again.
func IdleTimerArmed(h *Hub, gvr schema.GroupVersionResource) bool {
	return h.feeds.IdleTimerArmed(gvr)
}

// QuietSource is a Source whose resource types list empty at version rv
// and whose watches never deliver: benchmarks feed the handler themselves
// (ProcessRaw, ProcessList).
func QuietSource(rv uint64) Source { return quietSource{rv: rv} }

type quietSource struct{ rv uint64 }

// listThenWatch is a ListWatch the Reflector lists with a LIST, as it
// would a source without WatchList, whose watch never delivers the
// initial events' bookmark.
type listThenWatch struct{ *cache.ListWatch }

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

func (s quietSource) ListerWatcher(upstream.ResourceInfo, string) cache.ListerWatcher {
	return listThenWatch{&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			list := &upstream.ObjectList{}
			list.ResourceVersion = strconv.FormatUint(s.rv, 10)
			return list, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return watch.NewFake(), nil
		},
	}}
}

// RawChange is an object as the API server would send it, for ProcessRaw
// and ProcessList. Labels must be those of its JSON; UID defaults to
// "uid-" and its name.
type RawChange struct {
	Namespace, Name, UID string
	RV                   uint64
	Labels               map[string]string
	JSON                 string
}

func (c RawChange) object() *upstream.Object {
	raw := &upstream.Object{JSON: []byte(c.JSON)}
	raw.Namespace, raw.Name, raw.UID = c.Namespace, c.Name, types.UID(cmp.Or(c.UID, "uid-"+c.Name))
	raw.ResourceVersion = strconv.FormatUint(c.RV, 10)
	raw.Labels = c.Labels
	return raw
}

// ProcessRaw hands the resource type's running feed one change, as its
// informer would.
func ProcessRaw(h *Hub, gvr schema.GroupVersionResource, c RawChange) error {
	return feedOf(h, gvr).Process(cache.Deltas{{Type: cache.Updated, Object: c.object()}}, false)
}

// ProcessList hands the resource type's running feed a list at rv, as its
// informer does when it lists again: the feed records the list's
// differences from its state as one relist batch.
func ProcessList(h *Hub, gvr schema.GroupVersionResource, rv uint64, objs []RawChange) error {
	return feedOf(h, gvr).Process(listDeltas(rv, objs), false)
}

func listDeltas(rv uint64, objs []RawChange) cache.Deltas {
	items := make([]any, len(objs))
	for i, c := range objs {
		items[i] = c.object()
	}
	list := cache.ReplacedAllInfo{ResourceVersion: strconv.FormatUint(rv, 10), Objects: items}
	return cache.Deltas{{Type: cache.ReplacedAll, Object: list}}
}

// PrepareList does for a list what the informer's handler does before
// taking the feed's lock (see ProcessList), and returns what it does under
// the lock: calling that completes the handling of the list.
func PrepareList(h *Hub, gvr schema.GroupVersionResource, rv uint64, objs []RawChange) (record func() error) {
	return feedOf(h, gvr).PrepareDeltas(listDeltas(rv, objs))
}

// ProbeLock takes and releases the lock of the resource type's feed over
// and over, on a goroutine of its own, until the function it returns is
// called; that returns the longest the probe waited for the lock, which is
// about the longest anyone held it meanwhile (plus the time the scheduler
// took to wake the probe), and how many times it took it.
func ProbeLock(h *Hub, gvr schema.GroupVersionResource) (stop func() (longest time.Duration, probes int)) {
	f := feedOf(h, gvr)
	quit := make(chan struct{})
	type result struct {
		longest time.Duration
		probes  int
	}
	done := make(chan result)
	go func() {
		var r result
		for {
			select {
			case <-quit:
				done <- r
				return
			default:
			}
			waited := f.ProbeLock()
			r.longest = max(r.longest, waited)
			r.probes++
		}
	}()
	return func() (time.Duration, int) {
		close(quit)
		r := <-done
		return r.longest, r.probes
	}
}

// CutDisk deletes the resource type's records before seq from the disk, as
// retention by size would, from the writer's side.
func CutDisk(h *Hub, gvr schema.GroupVersionResource, seq uint64) error {
	return h.disk.Cut(upstream.FormatResource(gvr), seq)
}

// RetryDiskAtOnce makes the disk history start over a resource type whose
// write failed at the writer's next pass, rather than a minute later.
func RetryDiskAtOnce(h *Hub) { h.disk.SetRetryAfter(0) }

// FailDisk makes the disk history fail, as a full disk would.
func FailDisk(h *Hub) { h.disk.Fail(errors.New("injected: the disk is full")) }

// HistoryLen counts the records the resource type's history holds in
// memory.
func HistoryLen(h *Hub, gvr schema.GroupVersionResource) int { return feedOf(h, gvr).HistoryLen() }

// OnDisk reports whether the resource type's feed writes to the disk.
func OnDisk(h *Hub, gvr schema.GroupVersionResource) bool { return feedOf(h, gvr).WritesToDisk() }

// Synced returns a channel closed when the resource type's feed has
// synced.
func Synced(h *Hub, gvr schema.GroupVersionResource) <-chan struct{} { return feedOf(h, gvr).Synced() }

// Stopped returns a channel closed when the resource type's feed has
// stopped.
func Stopped(h *Hub, gvr schema.GroupVersionResource) <-chan struct{} {
	return feedOf(h, gvr).Stopped()
}

// DiskBatchesRead counts the batches subscribers read from the disk.
func DiskBatchesRead(h *Hub) uint64 { return h.disk.Stats().BatchesRead }

// OnDiskRead makes fn run after each batch a subscriber reads from the
// disk.
func OnDiskRead(h *Hub, fn func()) { h.disk.AfterRead(fn) }

// ViewSlots counts the slots of views other than the default one that the
// records of a resource type's history hold.
func ViewSlots(h *Hub, gvr schema.GroupVersionResource) int {
	total, _ := feedOf(h, gvr).ViewSlots()
	return total
}

// Counters counts the hub's running counters (see Hub.Count).
func Counters(h *Hub) int { return h.counts.len() }

// GroupOf returns the group of an object's JSON as a Count with groupBy
// groups it.
func GroupOf(groupBy, obj string) (string, error) {
	g, err := parseGroupBy(groupBy)
	if err != nil {
		return "", err
	}
	return g.group(obj)
}

// CountingSubscription opens the subscription a counter of req counts
// from (see Hub.countSubscription), for a test to hand to StartCounter.
func CountingSubscription(ctx context.Context, h *Hub, req CountRequest) (*Subscription, error) {
	g, err := parseGroupBy(req.GroupBy)
	if err != nil {
		return nil, err
	}
	return h.countSubscription(ctx, req, g)
}

// StartCounter starts a counter of req on sub, a subscription from
// CountingSubscription that the test may have let fall behind, as Count
// starts one on a subscription it opens; and returns a caller's share.
func StartCounter(h *Hub, sub *Subscription, req CountRequest) (*CountSubscription, error) {
	g, err := parseGroupBy(req.GroupBy)
	if err != nil {
		return nil, err
	}
	c := newCounter(countKey{resource: req.Selector.Resource, groupBy: g.key})
	c.refs = 1
	close(c.started)
	subscribe := func(ctx context.Context) (*Subscription, error) { return h.countSubscription(ctx, req, g) }
	if err := h.counts.run(c, sub, subscribe, g, h.cfg.CountInterval); err != nil {
		return nil, err
	}
	return &CountSubscription{c: c, hub: h, closed: make(chan struct{})}, nil
}

// NextRecountBackoff is nextRecountBackoff.
var NextRecountBackoff = nextRecountBackoff

// ViewSlotSize is what a record counts for one view's slot.
const ViewSlotSize = state.ViewSlotSize
