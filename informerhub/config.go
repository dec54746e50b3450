package informerhub

import (
	"log/slog"
	"time"

	"k8s.io/apiserver/pkg/storage/value"
)

// Config tunes a Hub. The zero value is usable: every field has a default.
type Config struct {
	// HistorySize and HistoryBytes bound the changes per resource type the
	// hub keeps for resuming and for subscribers that fell behind: at most
	// HistorySize of them, holding at most HistoryBytes (approximately:
	// each change counts the objects that left the state with it, its
	// previous state and a deletion's final state, and the events built
	// for it, with their encodings, from the next change on; see
	// History.count), besides the newest relist's differences, which it
	// holds whole until newer changes alone fill these bounds. Besides
	// them, the events built for subscribers' projections, previous states
	// and encodings are kept for sharing while they fit in another
	// HistoryBytes; past that, each subscriber builds its own. Every
	// resource type's history counts within MemoryBudget, which may evict
	// sooner. A resume token older than the
	// history is replayed from the API server, which costs one upstream
	// watch while it lasts; only when the API server no longer has the
	// token's resourceVersion is it answered with ErrTokenExpired.
	// Defaults: 10000 and 256 MiB.
	HistorySize  int
	HistoryBytes int64

	// HistoryStore, when set, keeps every resource type's history on disk
	// as well (internal/durable): resume tokens then continue exactly across
	// restarts of the hub and long after etcd compacted their
	// resourceVersions, within HistoryRetention and HistoryDiskBytes. The
	// caller opens it (historystore.Open) and closes it after the Hub.
	HistoryStore HistoryStore
	// HistoryRetention and HistoryDiskBytes bound the disk history: records
	// older than HistoryRetention go, then the oldest whatever their
	// resource type while the store takes more than HistoryDiskBytes.
	// Zero: no bound of that kind. Defaults: none (the flags set them).
	// Retention runs every HistoryRetentionCheck (default 10s), a cut by
	// size at most per check (the space a cut frees shows only once Pebble
	// has compacted).
	HistoryRetention time.Duration
	HistoryDiskBytes int64
	// HistoryMaxUnwrittenBytes bounds what one resource type's changes
	// waiting to be written to disk hold in memory, which the history
	// cannot evict. Past it (a slow or stalled disk, a huge relist), that
	// type stops writing and is served from memory alone until the writer
	// has caught up; then its disk history starts over from there (see
	// the feed's spillDiskLocked). Default: 64 MiB.
	HistoryMaxUnwrittenBytes int64
	HistoryRetentionCheck    time.Duration
	// HistoryTransformers, with HistoryStore, transform what the disk
	// history writes of each resource type's objects as the API server
	// transforms what it writes to etcd: encrypted with the providers an
	// EncryptionConfiguration gives the type, each value authenticated with
	// the key it is stored under (see historystore's seal.go). k8s.io/apiserver's
	// encryptionconfig.LoadEncryptionConfig builds them from such a file
	// (as encryptionconfig.StaticTransformers), as cmd/informerhub does for
	// --history-encryption-config; the file is read once. A resource type
	// whose transformer writes values as they are (identity: no entry
	// names it, or identity is its first provider) is written as without
	// them. Secrets are written only encrypted: while their transformer
	// would write them as they are, or HistoryTransformers is nil, their
	// history stays in memory, as without HistoryStore, and what the
	// store held of them is deleted when the Hub starts. Nil: every other
	// resource type as it is.
	HistoryTransformers value.ResourceTransformers
	// Retain names resource types whose informers run from the start and
	// never stop for idleness, so that their history is recorded whether
	// or not anyone subscribes: "pods", "deployments.apps",
	// "events.events.k8s.io" (the highest version the cluster serves), or
	// with a version, "deployments.v1.apps".
	Retain []string

	// MemoryBudget bounds what the hub holds for all resource types at
	// once besides their state: histories, subscribers' queues and label
	// indexes. Past it, the hub first stops keeping the events of
	// projections, previous states and encodings for sharing, then evicts
	// history records, the oldest change first whatever its resource type,
	// each history keeping its newest; queues and indexes are never
	// evicted (see package internal/memory). Resume tokens older than
	// what remains are replayed from the API server, and subscribers that
	// fell behind into the evicted records end with ErrSubscriberTooSlow.
	// Default: 1 GiB.
	MemoryBudget int64

	// MaxConcurrentReplays bounds the replays (see HistoryBytes) running at
	// once, each an upstream watch; more wait for a slot. Default: 64.
	MaxConcurrentReplays int
	// MaxReplaysPerOwner bounds the slots one owner's replays
	// (WatchRequest.Owner: one identity) take at once: more of its replays
	// wait for its own, so that one client cannot take every slot from the
	// rest. Default: 8.
	MaxReplaysPerOwner int
	// MaxReplayStateBytes bounds the state all replays with a filter,
	// projection or previous state hold at once: each keeps the objects of
	// its selection, listed at its token's version (see package internal/stream). A
	// replay that would take them past it is refused (ErrLimitExceeded),
	// and a client retries later. Default: 256 MiB.
	MaxReplayStateBytes int64

	// QueueSize bounds the changes waiting to be sent to one subscriber. A
	// subscriber that falls further behind reads on from the history
	// instead, at its own pace, so one slow client never delays the others
	// or grows the hub's memory; it is ended with a *TooSlowError
	// (ErrSubscriberTooSlow) only once the history no longer holds its
	// position. It is at most half of HistorySize. Default: 1000.
	QueueSize int

	// BookmarkInterval bounds how long a subscriber receives nothing: a
	// stream that has been quiet for between half of it and all of it gets a
	// bookmark with a fresh resume token. Default: 1m.
	BookmarkInterval time.Duration

	// CountInterval bounds how often the counts of a Count change for its
	// callers: a counter publishes new counts when they change, at most
	// once per CountInterval, with every change up to then (see
	// Hub.Count). Default: 1s.
	CountInterval time.Duration
	// MaxCountGroups bounds the groups one Count's objects may fall in: a
	// Count whose objects fall in more fails (RESOURCE_EXHAUSTED), as one
	// does whose group value is longer than MaxCountGroupBytes, so that a
	// grouping by a field of as many values as objects (metadata.name, a
	// whole spec) costs no more than that. Default: 10000.
	MaxCountGroups int

	// MaxUpstreamFailure is how long an informer's lists and watches may
	// fail, with nothing delivered, before it ends (ErrUnavailable) and
	// its subscribers with it, carrying their tokens: after the hub lost
	// its RBAC, say, its streams would otherwise stay open with a position
	// that no longer moves. Longer than an API server restart. Default: 5m.
	MaxUpstreamFailure time.Duration

	// ConsistencyCheckInterval is how often each informer checks its cache
	// against the API server, as the kube-apiserver checks its watch cache
	// against etcd: the API server's LIST at exactly the cache's
	// resourceVersion, ConsistencyCheckPageSize objects a page, digested
	// (package digest) and compared with the cache's digest there; on a
	// difference, the informer logs the first objects that differ and
	// relists, and its subscribers receive the differences as changes from
	// a relist. Each interval is jittered up to a fifth longer. Zero: the
	// default, 5m; negative: never. ConsistencyCheckPageSize defaults to
	// 500.
	ConsistencyCheckInterval time.Duration
	ConsistencyCheckPageSize int64

	// IdleTimeout is how long a resource type's informer keeps running after
	// its last subscriber has gone. Until then, the history stays and
	// resume tokens keep working. Default: 5m.
	IdleTimeout time.Duration

	// SnapshotPageSize and SnapshotPageBytes bound a snapshot page: it holds
	// at most this many objects, and stops before this many bytes of JSON
	// (but always holds at least one object). Defaults: 500 and 1 MiB.
	SnapshotPageSize  int
	SnapshotPageBytes int

	// StripManagedFields removes metadata.managedFields from objects as
	// they are cached; it is often 40% of an object's size. Off by default,
	// so clients receive objects exactly as the API server serves them.
	StripManagedFields bool

	// UpstreamCompression asks the API server to gzip what it sends the
	// hub: LIST responses and watch-list streams, whose every event it
	// then compresses on its own (one gzip stream per flush) and the hub
	// decompresses (5% of the hub's CPU per change in
	// test/bench/results/pprof/ingest-decode-before.pb.gz, and the API
	// server's compression on top). Off by default: between a hub and its
	// API server, on the cluster's network, the bytes are cheaper than the
	// CPU. Turn it on when the hub reaches the API server over a slow or
	// metered link. Used by NewForConfig.
	UpstreamCompression bool

	// MaxSelectorLength bounds the length of a label or field selector, and
	// MaxSelectorTerms the requirements in one. Defaults: 4096 and 64.
	MaxSelectorLength int
	MaxSelectorTerms  int

	// MaxFilterLength bounds the length of a filter, in bytes. Default:
	// 4096.
	MaxFilterLength int
	// MaxFilterEstimatedCost bounds a filter's cost as estimated when it
	// is compiled, on the largest objects the API server accepts (see
	// package celfilter): it refuses expressions whose cost grows with the square
	// of an object's size. Default: 10,000,000, the API server's limit on
	// a CRD validation rule.
	MaxFilterEstimatedCost uint64
	// MaxFilterCost bounds the cost of one evaluation of a filter on one
	// object, in CEL's cost units (about 0.1 to 0.4 µs each). An
	// evaluation that would cost more stops there: the filter could not
	// decide, so the object is sent, marked (Event.FilterError), and the
	// result is cached on the object with its other filters' (the 16 most
	// recent), so that each state of an object rarely costs a filter this
	// more than once. It is far below the API server's limit
	// (1,000,000) because the hub evaluates filters on the path of every
	// change. Default: 10,000.
	MaxFilterCost uint64
	// MaxFiltersPerResource bounds the distinct filters in use on one
	// resource type at once: each costs an evaluation per change. A
	// subscription with one more is refused (ErrLimitExceeded). Default:
	// 32.
	MaxFiltersPerResource int
	// MaxProjectionsPerResource bounds the distinct projections (Fields)
	// in use on one resource type at once: each costs a projection per
	// change. Default: 32.
	MaxProjectionsPerResource int
	// MaxFiltersPerOwner and MaxProjectionsPerOwner bound the distinct
	// filters and projections the subscriptions of one owner
	// (WatchRequest.Owner: one identity) hold on one resource type, so
	// that no one client takes every slot of MaxFiltersPerResource or
	// MaxProjectionsPerResource. Defaults: 8 and 8.
	MaxFiltersPerOwner     int
	MaxProjectionsPerOwner int
	// MaxFields bounds the paths of one projection. Default: 64.
	MaxFields int

	// EncodeEvent, when set, encodes each event once for its transport;
	// every subscriber then shares the encoding (Event.Encoded). Kept in
	// the form the transport sends, it costs nothing per subscriber; its
	// Len counts in the history with the event. Nil from EncodeEvent: the
	// transport encodes the event per subscriber.
	EncodeEvent func(*Event) Encoded

	// Logger receives the hub's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultHistorySize           = 10000
	DefaultHistoryBytes          = 256 << 20
	DefaultMemoryBudget          = 1 << 30
	DefaultMaxConcurrentReplays  = 64
	DefaultMaxReplaysPerOwner    = 8
	DefaultMaxReplayStateBytes   = 256 << 20
	DefaultQueueSize             = 1000
	DefaultBookmarkInterval      = time.Minute
	DefaultCountInterval         = time.Second
	DefaultMaxCountGroups        = 10000
	DefaultIdleTimeout           = 5 * time.Minute
	DefaultHistoryRetentionCheck = 10 * time.Second
	DefaultHistoryMaxUnwritten   = 64 << 20
	DefaultMaxUpstreamFailure    = 5 * time.Minute
	DefaultConsistencyCheck      = 5 * time.Minute
	DefaultConsistencyPageSize   = 500
	DefaultSnapshotPageSize      = 500
	DefaultSnapshotPageBytes     = 1 << 20
	DefaultMaxSelectorLength     = 4096
	DefaultMaxSelectorTerms      = 64

	DefaultMaxFilterLength           = 4096
	DefaultMaxFilterEstimatedCost    = 10_000_000
	DefaultMaxFilterCost             = 10_000
	DefaultMaxFiltersPerResource     = 32
	DefaultMaxProjectionsPerResource = 32
	DefaultMaxFiltersPerOwner        = 8
	DefaultMaxProjectionsPerOwner    = 8
	DefaultMaxFields                 = 64
)

func (c *Config) setDefaults() {
	orDefault(&c.HistorySize, DefaultHistorySize)
	orDefault(&c.HistoryBytes, DefaultHistoryBytes)
	orDefault(&c.HistoryRetentionCheck, DefaultHistoryRetentionCheck)
	orDefault(&c.HistoryMaxUnwrittenBytes, DefaultHistoryMaxUnwritten)
	orDefault(&c.MemoryBudget, DefaultMemoryBudget)
	orDefault(&c.MaxConcurrentReplays, DefaultMaxConcurrentReplays)
	orDefault(&c.MaxReplaysPerOwner, DefaultMaxReplaysPerOwner)
	orDefault(&c.MaxReplayStateBytes, DefaultMaxReplayStateBytes)
	orDefault(&c.QueueSize, DefaultQueueSize)
	c.QueueSize = max(1, min(c.QueueSize, c.HistorySize/2))
	orDefault(&c.BookmarkInterval, DefaultBookmarkInterval)
	orDefault(&c.CountInterval, DefaultCountInterval)
	orDefault(&c.MaxCountGroups, DefaultMaxCountGroups)
	orDefault(&c.IdleTimeout, DefaultIdleTimeout)
	orDefault(&c.MaxUpstreamFailure, DefaultMaxUpstreamFailure)
	if c.ConsistencyCheckInterval == 0 {
		c.ConsistencyCheckInterval = DefaultConsistencyCheck
	}
	orDefault(&c.ConsistencyCheckPageSize, DefaultConsistencyPageSize)
	orDefault(&c.SnapshotPageSize, DefaultSnapshotPageSize)
	orDefault(&c.SnapshotPageBytes, DefaultSnapshotPageBytes)
	orDefault(&c.MaxSelectorLength, DefaultMaxSelectorLength)
	orDefault(&c.MaxSelectorTerms, DefaultMaxSelectorTerms)
	orDefault(&c.MaxFilterLength, DefaultMaxFilterLength)
	orDefault(&c.MaxFilterEstimatedCost, DefaultMaxFilterEstimatedCost)
	orDefault(&c.MaxFilterCost, DefaultMaxFilterCost)
	orDefault(&c.MaxFiltersPerResource, DefaultMaxFiltersPerResource)
	orDefault(&c.MaxProjectionsPerResource, DefaultMaxProjectionsPerResource)
	orDefault(&c.MaxFiltersPerOwner, DefaultMaxFiltersPerOwner)
	orDefault(&c.MaxProjectionsPerOwner, DefaultMaxProjectionsPerOwner)
	orDefault(&c.MaxFields, DefaultMaxFields)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// orDefault sets *v to def unless it is above zero: a zero (or negative)
// bound means the default.
func orDefault[T int | int64 | uint64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
