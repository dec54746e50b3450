package stream

import (
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/fanout"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/token"
	"github.com/informerhub/informerhub/informerhub/projection"
)

// Params is a validated WatchRequest: what a stream is asked.
type Params struct {
	Selector          *selection.Selector
	Projection        *projection.Projection
	Token             *token.Token
	SendInitialEvents bool
	IncludePrevious   bool
	Encoding          event.Encoding
	Owner             string
	Woken             *fanout.Woken
	// LazyReplay lets a replay whose slots are not free at once open its
	// upstream watch when first read, rather than wait for them at the
	// start: the watches of a WatchMany, whose earlier replays give their
	// slots back only as the stream reads them.
	LazyReplay bool
	// NeverReplay makes a subscription that loses its place in the history
	// fail as one that fell behind (a *TooSlowError), rather than replay
	// from the API server: a counter's, which counts afresh from the
	// state instead (see the hub's counter.run).
	NeverReplay bool
}
