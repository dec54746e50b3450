package informerhub

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ResourceStats is the hub's activity on one resource type, for metrics.
// Hub.Stats reports every resource type the hub has run an informer for.
type ResourceStats struct {
	Resource schema.GroupVersionResource

	// Levels, while the informer runs (InformerActive); zero otherwise.
	InformerActive bool
	// Subscribers counts open subscriptions and snapshots.
	Subscribers   int
	CachedObjects int
	// The history window (see Config.HistorySize): its changes and their
	// size, when the oldest point it resumes from arrived (the newest
	// change it evicted, or the informer's initial list), and when its
	// newest change arrived (or that point, without changes). Zero until
	// the informer has synced.
	HistoryEvents                int
	HistoryBytes                 int64
	HistoryOldest, HistoryNewest time.Time
	// UpstreamProgress is when the API server last delivered anything to
	// the informer (a list, a change, a bookmark: about once a minute when
	// nothing changes); UpstreamFailingSince, when its lists and watches
	// started failing since then (zero while they do not). See
	// Config.MaxUpstreamFailure.
	UpstreamProgress, UpstreamFailingSince time.Time
	// QueuePeak is the most changes a live subscriber's queue held, of
	// at most Config.QueueSize, right after one was queued, over at least
	// the last 30 seconds and at most the last minute: a subscriber whose
	// queue is full when a change comes falls behind. A peak, not the
	// queues at this instant, so that a burst between two scrapes shows,
	// and kept as changes are queued, so that Stats walks no subscriber.
	QueuePeak int
	// SubscriberGroups counts the distinct selectors of live subscribers,
	// each matched once per change it may concern (see package internal/fanout);
	// Filters and Projections, the distinct filters and projections in
	// use (bounded by Config.MaxFiltersPerResource and
	// MaxProjectionsPerResource).
	SubscriberGroups, Filters, Projections int

	// Totals since the hub started, across restarts of the informer.
	//
	// InformerStarts counts the informers started (the first, and one per
	// start after an idle stop or a failure); WatchRestarts, the upstream
	// watches an informer opened after its first (the API server closed or
	// broke the previous one). EventsReceived counts the changes the
	// informer took (a relist's differences included); EventsSent, the
	// events subscriptions returned (initial events and bookmarks
	// included). FellBehind counts the times a live subscriber's queue
	// was full for a change, so that it went on reading from the history;
	// SlowDisconnects, subscribers ended because they fell behind further
	// than the history; Recounts, counters (Hub.Count) that fell behind
	// further than the history and counted afresh from the state (the
	// hub's counting does not keep up with the changes: it is overloaded);
	// ExpiredTokens, requests answered with
	// ErrTokenExpired; Relists, the relists after the first sync; Replays,
	// the tokens older than the history replayed from the API server.
	// FilterErrors counts evaluations of filters that could not decide (a
	// missing field, a type mismatch, the cost limit): their objects are
	// sent marked (Event.FilterError). ObjectErrors counts the events the
	// hub could not make of an object as a view asks (see ObjectError),
	// each ending the calls that asked.
	// DiskSpills counts the times the resource type stopped writing its
	// history to disk because the disk fell behind
	// (Config.HistoryMaxUnwrittenBytes, the memory budget) or a write
	// failed; each starts its disk history over once the writer has caught
	// up.
	// EvictedForMemory counts the history records evicted to keep the hub
	// within Config.MemoryBudget, before their resource type's own bounds
	// would have.
	// The Checks count the consistency checks
	// (Config.ConsistencyCheckInterval) by what they found: the cache
	// equal to the API server's LIST at its resourceVersion; different
	// (each then relisted); the position compacted away before the check
	// could list it (tried again at the next); the check failed (the LIST
	// failed).
	InformerStarts  uint64
	WatchRestarts   uint64
	EventsReceived  uint64
	EventsSent      uint64
	FellBehind      uint64
	SlowDisconnects uint64
	Recounts        uint64
	ExpiredTokens   uint64
	Relists         uint64
	Replays         uint64
	FilterErrors    uint64
	ObjectErrors    uint64
	DiskSpills      uint64

	EvictedForMemory uint64

	ChecksConsistent, ChecksDiverged, ChecksCompacted, ChecksFailed uint64

	// RetainedOldest is when the hub reached the oldest position a token
	// resumes from without the API server, in memory or on disk; zero
	// when inactive. DiskPending counts the changes not yet written to the
	// disk history (Config.HistoryStore).
	RetainedOldest time.Time
	DiskPending    uint64
}

// DiskStats is what the disk history (Config.HistoryStore) holds and did,
// for metrics; zero without one.
type DiskStats struct {
	Enabled bool
	// Bytes is what the store takes on disk (Config.HistoryDiskBytes
	// bounds it).
	Bytes uint64
	// Deleted counts the records retention deleted; WriteErrors the writes
	// that failed (each makes its resource type spill: see
	// ResourceStats.DiskSpills). Failed is set when the store itself failed
	// (retention, a drop): the disk history stops until the hub restarts,
	// and memory serves alone.
	Deleted, WriteErrors uint64
	Failed               bool
}

// MemoryStats is what the hub holds, in bytes (approximately: see
// Config.HistoryBytes), for metrics.
type MemoryStats struct {
	// Budget is Config.MemoryBudget, which bounds the sum of History,
	// Queues, LabelIndexes and StateClones (see Config.MemoryBudget).
	Budget int64
	// History is every resource type's history: records, the objects only
	// they keep alive, and the events built for them.
	History int64
	// Queues is subscribers' queues: what their deliveries waiting take,
	// each grown as they wait and given up once they are taken.
	Queues int64
	// LabelIndexes is the label indexes of every resource type's state.
	LabelIndexes int64
	// StateClones is what the clones of state that snapshots and initial
	// events read keep of the objects the state replaced since: past the
	// budget, the reader of the oldest is ended (LimitMemoryBudget).
	StateClones int64
	// State is the objects of every resource type's state: the cluster's
	// size, outside the budget.
	State int64
	// ReplayState is what stateful replays hold, bounded apart by
	// Config.MaxReplayStateBytes.
	ReplayState int64
	// EvictedForMemory counts the history records evicted to stay within
	// Budget, of every resource type.
	EvictedForMemory uint64
	// OverBudget counts the times the hub found itself over Budget with
	// nothing it could evict: what is left is queues, label indexes and
	// each history's newest change (or, for a moment, a feed busy with
	// its own work, which evicts after it). Growing for minutes, the
	// budget is too small for the streams the hub holds.
	OverBudget uint64
}
