package informerhub

import "github.com/informerhub/informerhub/informerhub/internal/durable"

// HistoryStore is where the disk history lives (Config.HistoryStore): a
// *historystore.Store, whose methods say what each does, or a wrapper of
// one, as tests use to race, stall and fail it on demand over real Pebble.
// It is exactly what the disk history calls: see durable.Store for the
// methods.
type HistoryStore = durable.Store
