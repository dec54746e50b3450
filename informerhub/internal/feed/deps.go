package feed

import (
	"log/slog"
	"time"

	"github.com/informerhub/informerhub/informerhub/internal/durable"
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/memory"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
)

// Deps is what the feeds of one hub share: their part of the hub's
// Config, the memory budget across them, and the disk history.
type Deps struct {
	// HistorySize and HistoryBytes bound each feed's history in memory;
	// HistoryMaxUnwrittenBytes, what it keeps for a disk that falls
	// behind; MaxUpstreamFailure, how long its API server may fail before
	// the feed stops; QueueSize, each live subscriber's queue. See the
	// hub's Config for each.
	HistorySize              int
	HistoryBytes             int64
	HistoryMaxUnwrittenBytes int64
	MaxUpstreamFailure       time.Duration
	QueueSize                int
	// Encode encodes each event once for its transport; nil: none.
	Encode func(*event.Event) event.Encoded
	// Limits bound what the selectors of each feed's subscribers ask for.
	Limits *selection.Limits
	Memory *memory.Account
	// Disk keeps the histories on disk; nil without.
	Disk *durable.History
	Log  *slog.Logger
	// Check is how often each feed checks its state against the API
	// server's (check.go).
	Check CheckConfig
	// StopHook, set by tests only, runs as a feed stops after its handler
	// panicked: a test makes it panic too.
	StopHook func()
}
