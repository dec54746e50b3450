package informerhub

import (
	"log/slog"
	"time"
)

// Config tunes a Hub. The zero value is usable: every field has a default.
type Config struct {
	// HistorySize and HistoryBytes bound the changes per resource type the
	// hub keeps for resuming: at most HistorySize of them, holding at most
	// HistoryBytes of object JSON (approximately: each change counts its
	// object's JSON and a fixed overhead). A resume token older than the
	// history is replayed from the API server, which costs one upstream
	// watch while it lasts; only when the API server no longer has the
	// token's resourceVersion is it answered with ErrTokenExpired.
	// Defaults: 10000 and 256 MiB.
	HistorySize  int
	HistoryBytes int64

	// MaxConcurrentReplays bounds the replays (see HistoryBytes) running at
	// once, each an upstream watch; more wait for a slot. Default: 64.
	MaxConcurrentReplays int

	// QueueSize bounds the changes waiting to be sent to one subscriber. A
	// subscriber that falls further behind is ended with a *TooSlowError
	// (ErrSubscriberTooSlow), so one slow client never delays the others or
	// grows the hub's memory. It is at most half of HistorySize, so that a
	// disconnected subscriber's token can still be resumed. Default: 1000.
	QueueSize int

	// BookmarkInterval bounds how long a subscriber receives nothing: a
	// stream that has been quiet for between half of it and all of it gets a
	// bookmark with a fresh resume token. Default: 1m.
	BookmarkInterval time.Duration

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

	// MaxSelectorLength bounds the length of a label or field selector, and
	// MaxSelectorTerms the requirements in one. Defaults: 4096 and 64.
	MaxSelectorLength int
	MaxSelectorTerms  int

	// EncodeEvent, when set, encodes each event once for its transport;
	// every subscriber then shares the encoding (Event.Encoded). It is the
	// transport's to type: kept in the form the transport sends, it costs
	// nothing per subscriber.
	EncodeEvent func(*Event) any

	// Logger receives the hub's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultHistorySize          = 10000
	DefaultHistoryBytes         = 256 << 20
	DefaultMaxConcurrentReplays = 64
	DefaultQueueSize            = 1000
	DefaultBookmarkInterval     = time.Minute
	DefaultIdleTimeout          = 5 * time.Minute
	DefaultSnapshotPageSize     = 500
	DefaultSnapshotPageBytes    = 1 << 20
	DefaultMaxSelectorLength    = 4096
	DefaultMaxSelectorTerms     = 64
)

func (c *Config) setDefaults() {
	if c.HistorySize <= 0 {
		c.HistorySize = DefaultHistorySize
	}
	if c.HistoryBytes <= 0 {
		c.HistoryBytes = DefaultHistoryBytes
	}
	if c.MaxConcurrentReplays <= 0 {
		c.MaxConcurrentReplays = DefaultMaxConcurrentReplays
	}
	if c.QueueSize <= 0 {
		c.QueueSize = DefaultQueueSize
	}
	c.QueueSize = max(1, min(c.QueueSize, c.HistorySize/2))
	if c.BookmarkInterval <= 0 {
		c.BookmarkInterval = DefaultBookmarkInterval
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.SnapshotPageSize <= 0 {
		c.SnapshotPageSize = DefaultSnapshotPageSize
	}
	if c.SnapshotPageBytes <= 0 {
		c.SnapshotPageBytes = DefaultSnapshotPageBytes
	}
	if c.MaxSelectorLength <= 0 {
		c.MaxSelectorLength = DefaultMaxSelectorLength
	}
	if c.MaxSelectorTerms <= 0 {
		c.MaxSelectorTerms = DefaultMaxSelectorTerms
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}
