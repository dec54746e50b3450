package stream

import (
	"context"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub/internal/feed"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// Deps is what the streams of one hub share.
type Deps struct {
	// Ctx is the hub's: every replay's upstream watch ends with it.
	Ctx context.Context
	// BookmarkInterval is the hub's Config.BookmarkInterval.
	BookmarkInterval time.Duration
	// Feeds is the hub's feeds; a stream releases its entry as it closes.
	Feeds *feed.Feeds
	// Source opens a replay's watches in one namespace.
	Source Source
	// Replays bounds the replays of every feed of the hub.
	Replays *ReplayLimits
}

// Source opens the list and watch calls of one resource type
// in one namespace ("" for cluster-wide), as the hub's Source does.
type Source interface {
	ListerWatcher(info upstream.ResourceInfo, namespace string) cache.ListerWatcher
}
