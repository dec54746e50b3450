package durable

import (
	"context"

	"k8s.io/apiserver/pkg/storage/value"

	"github.com/informerhub/informerhub/informerhub/historystore"
)

// Store is what the disk history needs of its store: a
// *historystore.Store, whose methods say what each does, or a wrapper of
// one, as tests use to race, stall and fail it over real Pebble. The core
// names it informerhub.HistoryStore (Config.HistoryStore).
type Store interface {
	Append(resource string, t value.Transformer, w historystore.Write) error
	Meta(resource string) (historystore.Meta, bool, error)
	Resources() (map[string]historystore.Meta, error)
	State(resource string, t value.Transformer, fn func(historystore.Object) error) error
	Read(resource string, t value.Transformer, seq, to uint64, max, maxBytes int) ([]historystore.Record, error)
	Head(resource string, seq uint64) (historystore.Record, error)
	LastAtOrBefore(resource string, first, last, rv uint64) (uint64, error)
	FirstAfter(resource string, first, last uint64, at int64) (uint64, error)
	EstimateBytes(resource string, seq uint64) (uint64, error)
	DeleteBefore(resource string, t value.Transformer, seq uint64, m historystore.Meta) (start, end []byte, err error)
	Compact(ctx context.Context, start, end []byte) error
	Drop(resource string) error
	Purge(ctx context.Context, resource string) error
	DiskBytes() uint64
}

var _ Store = (*historystore.Store)(nil)
