package informerhub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub/celfilter"
	"github.com/informerhub/informerhub/informerhub/internal/durable"
	"github.com/informerhub/informerhub/informerhub/internal/feed"
	"github.com/informerhub/informerhub/informerhub/internal/memory"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/stream"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// Hub runs one informer per resource type and serves any number of
// subscriptions and snapshots from it. It is safe for concurrent use.
type Hub struct {
	cfg Config
	// limits are cfg's bounds on what selectors ask for.
	limits   selection.Limits
	resolver Resolver
	source   Source
	log      *slog.Logger

	ctx    context.Context // parent of every informer and replay
	cancel context.CancelFunc

	// feeds are the running feeds, one per resource type.
	feeds *feed.Feeds
	// memory is what the hub holds for all resource types
	// (Config.MemoryBudget).
	memory *memory.Account
	// replays bounds the replays of every feed.
	replays *stream.ReplayLimits
	// filters compiles the filters of selectors, once per expression.
	filters *celfilter.Compiler
	// counts are the running counters of Count.
	counts *counts
	// disk keeps the histories on disk (Config.HistoryStore); nil without.
	disk *durable.History
	// informers runs every feed's informer, those the feeds no longer hold
	// too (stopped on a failure, or idle), so that Close waits for all.
	informers sync.WaitGroup
	// retainers runs the informers of Config.Retain (retain.go).
	retainers sync.WaitGroup
	// closers stop what New's caller started for the hub, after its
	// informers (see NewForConfig).
	closers []func()
	// feedDeps is what every feed shares, and streamDeps every stream; set
	// before the first starts.
	feedDeps   feed.Deps
	streamDeps stream.Deps
}

// Resolver tells which resource types the cluster serves, as
// upstream.Discovery does.
type Resolver interface {
	// Resolve returns what the cluster serves under gvr: an error matching
	// upstream.ErrNotServed when nothing, an *upstream.UnwatchableError
	// when it cannot be listed and watched, and any other error when it
	// cannot tell now (an *upstream.DiscoveryError).
	Resolve(ctx context.Context, gvr schema.GroupVersionResource) (upstream.ResourceInfo, error)
	// Resources lists every resource type that can be listed and watched.
	Resources(ctx context.Context) ([]upstream.ResourceInfo, error)
}

// Source opens the list and watch calls of one resource type, as
// upstream.Source does: cluster-wide for its informer (namespace ""), and
// in one namespace of a namespaced type for a replay.
type Source interface {
	ListerWatcher(info upstream.ResourceInfo, namespace string) cache.ListerWatcher
}

// ResourceStatus is a resource type with the hub's activity on it.
type ResourceStatus struct {
	upstream.ResourceInfo
	// InformerActive is set while the hub runs an informer for it.
	InformerActive bool
	// Subscribers counts its subscriptions and snapshots.
	Subscribers int
	// CachedObjects counts the objects in the hub's state.
	CachedObjects int
	// The history window: HistoryEvents changes holding about HistoryBytes
	// (see Config.HistoryBytes). A token at or after HistoryResourceVersion
	// resumes from memory; an older one is replayed from the API server.
	HistoryEvents          int
	HistoryBytes           int64
	HistoryResourceVersion string
	// RetainedResourceVersion and RetainedSince are the oldest position a
	// token resumes from without the API server, in memory or on disk
	// (Config.HistoryStore), and when the hub reached it; empty and zero
	// when the hub holds nothing of the resource type.
	RetainedResourceVersion string
	RetainedSince           time.Time
	// Retained is set for a resource type of Config.Retain.
	Retained bool
}

// NewForConfig returns a Hub for the cluster that restConfig reaches: it finds
// resource types through discovery and runs its informers with one shared
// HTTP client.
func NewForConfig(restConfig *rest.Config, cfg Config) (*Hub, error) {
	restConfig = rest.CopyConfig(restConfig)
	restConfig.DisableCompression = !cfg.UpstreamCompression
	httpClient, err := rest.HTTPClientFor(restConfig)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes HTTP client: %w", err)
	}
	discoveryClient, err := discovery.NewDiscoveryClientForConfigAndClient(restConfig, httpClient)
	if err != nil {
		return nil, fmt.Errorf("building the discovery client: %w", err)
	}
	source, err := upstream.NewSource(restConfig, httpClient, cfg.StripManagedFields)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	crds := upstream.NewCRDFields(source, logger)
	resolver := upstream.NewDiscovery(discoveryClient, upstream.DiscoveryConfig{Logger: logger, CRDs: crds})
	h := New(cfg, resolver, source)
	crds.Start()
	h.closers = append(h.closers, crds.Stop)
	return h, nil
}

// New returns a Hub that resolves resource types with resolver and runs
// informers on source. Close it to stop every informer.
func New(cfg Config, resolver Resolver, source Source) *Hub {
	cfg.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	h := &Hub{
		cfg:      cfg,
		resolver: resolver,
		source:   source,
		log:      cfg.Logger,
		ctx:      ctx,
		cancel:   cancel,
		replays:  stream.NewReplayLimits(cfg.MaxConcurrentReplays, cfg.MaxReplaysPerOwner, cfg.MaxReplayStateBytes),
		counts:   newCounts(cfg.MaxCountGroups),
		filters:  celfilter.NewCompiler(cfg.MaxFilterEstimatedCost, cfg.MaxFilterCost),
		limits: selection.Limits{
			MaxSelectorLength: cfg.MaxSelectorLength, MaxFilterLength: cfg.MaxFilterLength, MaxSelectorTerms: cfg.MaxSelectorTerms,
			MaxFiltersPerResource: cfg.MaxFiltersPerResource, MaxProjectionsPerResource: cfg.MaxProjectionsPerResource,
			MaxFiltersPerOwner: cfg.MaxFiltersPerOwner, MaxProjectionsPerOwner: cfg.MaxProjectionsPerOwner,
		},
	}
	h.feeds = feed.NewFeeds(cfg.IdleTimeout, func(info upstream.ResourceInfo, counters *feed.Counters) *feed.Feed {
		f := feed.New(&h.feedDeps, info, counters)
		f.Start(h.ctx, h.source.ListerWatcher(info, ""), &h.informers)
		return f
	})
	h.memory = memory.New(cfg.MemoryBudget, h.log, h.feeds.Holders)
	if cfg.HistoryStore != nil {
		h.disk = durable.New(durable.Config{
			Store: cfg.HistoryStore, Transformers: cfg.HistoryTransformers, Logger: h.log,
			Retention: cfg.HistoryRetention, DiskBytes: cfg.HistoryDiskBytes, RetentionCheck: cfg.HistoryRetentionCheck,
		})
	}
	h.feedDeps = feed.Deps{
		HistorySize: cfg.HistorySize, HistoryBytes: cfg.HistoryBytes, HistoryMaxUnwrittenBytes: cfg.HistoryMaxUnwrittenBytes,
		MaxUpstreamFailure: cfg.MaxUpstreamFailure, QueueSize: cfg.QueueSize, Encode: cfg.EncodeEvent,
		Limits: &h.limits, Memory: h.memory, Disk: h.disk, Log: h.log,
		Check: feed.CheckConfig{Interval: max(0, cfg.ConsistencyCheckInterval), PageSize: cfg.ConsistencyCheckPageSize},
	}
	h.streamDeps = stream.Deps{Ctx: h.ctx, BookmarkInterval: cfg.BookmarkInterval, Feeds: h.feeds, Source: h.source, Replays: h.replays}
	for _, name := range cfg.Retain {
		h.retainers.Add(1)
		go func() {
			defer h.retainers.Done()
			retain(h, name)
		}()
	}
	return h
}

// Watch starts a subscription. It waits for the resource type's informer to
// sync when it is the first subscriber. Close the subscription when done.
func (h *Hub) Watch(ctx context.Context, req WatchRequest) (*Subscription, error) {
	info, params, err := h.watchParams(ctx, req)
	if err != nil {
		return nil, err
	}
	if req.ResumeToken != "" {
		if params.Token, err = checkToken(req.ResumeToken, info, params.Selector); err != nil {
			return nil, err
		}
	}
	return h.subscribe(ctx, info, params)
}

// watchParams validates a WatchRequest, but for its resume token, and
// resolves its resource type.
func (h *Hub) watchParams(ctx context.Context, req WatchRequest) (upstream.ResourceInfo, *stream.Params, error) {
	if req.Encoding >= MaxEncodings {
		return upstream.ResourceInfo{}, nil, &RequestError{Field: FieldObjectFormat, Err: ErrInvalidRequest, Reason: fmt.Sprintf("encoding %d is not one the hub knows", req.Encoding)}
	}
	proj, err := parseFields(req.Fields, h.cfg.MaxFields)
	if err != nil {
		return upstream.ResourceInfo{}, nil, err
	}
	info, sel, err := h.prepare(ctx, req.Selector)
	if err != nil {
		return upstream.ResourceInfo{}, nil, err
	}
	return info, &stream.Params{Selector: sel, Projection: proj, SendInitialEvents: req.SendInitialEvents,
		IncludePrevious: req.IncludePrevious, Encoding: req.Encoding, Owner: req.Owner, Woken: req.Woken}, nil
}

// subscribe starts a subscription of a validated request.
func (h *Hub) subscribe(ctx context.Context, info upstream.ResourceInfo, params *stream.Params) (*Subscription, error) {
	e, err := h.feeds.Acquire(ctx, info)
	if err != nil {
		return nil, err
	}
	s := &Subscription{}
	if err := s.st.Open(ctx, &h.streamDeps, e, params); err != nil {
		h.feeds.Release(e)
		return nil, err
	}
	return s, nil
}

// Snapshot returns the matching objects of one point in time, to be read in
// pages. Close it when done.
func (h *Hub) Snapshot(ctx context.Context, req SnapshotRequest) (*Snapshot, error) {
	proj, err := parseFields(req.Fields, h.cfg.MaxFields)
	if err != nil {
		return nil, err
	}
	info, sel, err := h.prepare(ctx, req.Selector)
	if err != nil {
		return nil, err
	}
	e, err := h.feeds.Acquire(ctx, info)
	if err != nil {
		return nil, err
	}
	s, err := newSnapshot(h, e, sel, proj)
	if err != nil {
		h.feeds.Release(e)
		return nil, err
	}
	return s, nil
}

// Resources lists the resource types the cluster serves that can be watched,
// with the hub's activity on each.
func (h *Hub) Resources(ctx context.Context) ([]ResourceStatus, error) {
	infos, err := h.resources(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ResourceStatus, len(infos))
	active := h.feeds.Activities(infos)
	for i, info := range infos {
		out[i].ResourceInfo = info
		if a := active[i]; a.Feed != nil {
			out[i].InformerActive, out[i].Subscribers, out[i].Retained = true, a.Subscribers, a.Retained
			l := a.Feed.Levels()
			out[i].CachedObjects = l.CachedObjects
			if l.Synced {
				out[i].HistoryEvents, out[i].HistoryBytes = l.HistoryEvents, l.HistoryBytes
				out[i].HistoryResourceVersion = strconv.FormatUint(l.HistoryFloorRV, 10)
				out[i].RetainedResourceVersion, out[i].RetainedSince = strconv.FormatUint(l.RetainedRV, 10), l.RetainedSince
			}
			continue
		}
		if h.disk != nil {
			// What the disk holds of the resource types with no informer.
			if rv, at, ok := h.disk.Window(upstream.FormatResource(info.Resource)); ok {
				out[i].RetainedResourceVersion, out[i].RetainedSince = strconv.FormatUint(rv, 10), time.Unix(0, at)
			}
		}
	}
	return out, nil
}

// Config returns the hub's configuration, defaults filled in.
func (h *Hub) Config() Config { return h.cfg }

// Close stops every informer; subscriptions end with ErrClosed.
func (h *Hub) Close() {
	feeds, ok := h.feeds.Close()
	if !ok {
		return
	}
	h.counts.close()
	for _, f := range feeds {
		f.Stop(ErrClosed)
	}
	// The feeds let go of before Close stop by themselves: a failed one
	// has stopped, an idle one is stopping.
	h.informers.Wait()
	// Their subscriptions failed with their feeds.
	h.counts.running.Wait()
	h.cancel()
	h.retainers.Wait()
	if h.disk != nil {
		h.disk.Close() // after every feed stopped: writes what they left
	}
	for _, c := range h.closers {
		c()
	}
}

// CheckSyntax checks what can be checked of s without the cluster: the
// names of its resource and namespace, and the lengths of its selectors and
// filter, within the hub's limits. It reveals nothing about what exists, so
// a transport runs it before asking who may do what: no malformed or
// oversized request becomes an authorization review, a cache key or a log
// line. Watch and Snapshot check all of it again, and the rest.
func (h *Hub) CheckSyntax(s Selector) error {
	if err := selection.ValidateResource(s); err != nil {
		return err
	}
	return selection.CheckSyntax(s, &h.limits)
}

// Stats reports the hub's activity on each resource type it has run an
// informer for, in no particular order. It takes each informer's lock
// briefly, for what the informer keeps counted: it walks no subscriber
// and no object.
func (h *Hub) Stats() []ResourceStats {
	all := h.feeds.Totals()
	out := make([]ResourceStats, 0, len(all))
	for gvr, t := range all {
		rs := ResourceStats{Resource: gvr}
		if f := t.Activity.Feed; f != nil {
			rs.InformerActive, rs.Subscribers = true, t.Activity.Subscribers
			l := f.Levels()
			rs.CachedObjects = l.CachedObjects
			rs.HistoryEvents, rs.HistoryBytes = l.HistoryEvents, l.HistoryBytes
			rs.HistoryOldest, rs.HistoryNewest = l.HistoryOldest, l.HistoryNewest
			rs.RetainedOldest, rs.DiskPending = l.RetainedSince, l.DiskPending
			rs.UpstreamProgress, rs.UpstreamFailingSince = l.UpstreamProgress, l.UpstreamFailingSince
			rs.SubscriberGroups, rs.Filters, rs.Projections = l.SubscriberGroups, l.Filters, l.Projections
			rs.QueuePeak = l.QueuePeak
		}
		// After the feed's lock: the counters include what the feed
		// counted while it held it (a relist's spill, say), so a caller
		// that saw its results sees them counted.
		c := t.Counters
		rs.InformerStarts = c.Starts.Load()
		rs.WatchRestarts = c.WatchRestarts.Load()
		rs.EventsReceived = c.Received.Load()
		rs.EventsSent = c.Sent.Load()
		rs.FellBehind = c.FellBehind.Load()
		rs.SlowDisconnects = c.SlowDisconnects.Load()
		rs.Recounts = c.Recounts.Load()
		rs.ExpiredTokens = c.ExpiredTokens.Load()
		rs.Relists = c.Relists.Load()
		rs.Replays = c.Replays.Load()
		rs.FilterErrors = c.FilterErrors.Load()
		rs.ObjectErrors = c.ObjectErrors.Load()
		rs.DiskSpills = c.DiskSpills.Load()
		rs.EvictedForMemory = c.EvictedForMemory.Load()
		rs.ChecksConsistent, rs.ChecksDiverged = c.ChecksConsistent.Load(), c.ChecksDiverged.Load()
		rs.ChecksCompacted, rs.ChecksFailed = c.ChecksCompacted.Load(), c.ChecksFailed.Load()
		out = append(out, rs)
	}
	return out
}

// Memory reports what the hub holds. It takes no lock.
func (h *Hub) Memory() MemoryStats {
	m := h.memory
	return MemoryStats{
		Budget:           m.Held.Max(),
		History:          m.History.Used(),
		Queues:           m.Queues.Used(),
		LabelIndexes:     m.Indexes.Used(),
		StateClones:      m.Clones.Used(),
		State:            m.State.Used(),
		ReplayState:      h.replays.StateBytes(),
		EvictedForMemory: m.Evicted(),
		OverBudget:       m.OverBudget(),
	}
}

// Disk reports on the disk history.
func (h *Hub) Disk() DiskStats {
	if h.disk == nil {
		return DiskStats{}
	}
	s := h.disk.Stats()
	return DiskStats{Enabled: true, Bytes: s.Bytes, Deleted: s.Deleted, WriteErrors: s.WriteErrors, Failed: s.Failed}
}

// prepare validates a selector and resolves its resource type.
func (h *Hub) prepare(ctx context.Context, s Selector) (upstream.ResourceInfo, *selection.Selector, error) {
	if err := selection.ValidateResource(s); err != nil {
		return upstream.ResourceInfo{}, nil, err
	}
	info, err := h.resolve(ctx, s.Resource)
	if err != nil {
		return upstream.ResourceInfo{}, nil, err
	}
	sel, err := selection.Parse(s, info, &h.limits, h.filters)
	if err != nil {
		return upstream.ResourceInfo{}, nil, err
	}
	if sel.Filter() != nil {
		sel.CountFilterErrors(&h.feeds.CountersFor(info.Resource).FilterErrors)
	}
	return info, sel, nil
}

// resolve asks the resolver what the cluster serves under gvr, and says
// what it answers in the hub's errors.
func (h *Hub) resolve(ctx context.Context, gvr schema.GroupVersionResource) (upstream.ResourceInfo, error) {
	info, err := h.resolver.Resolve(ctx, gvr)
	if err != nil {
		return upstream.ResourceInfo{}, resolverError(gvr, err)
	}
	return info, nil
}

// resources asks the resolver for every resource type the cluster serves
// that can be listed and watched.
func (h *Hub) resources(ctx context.Context) ([]upstream.ResourceInfo, error) {
	infos, err := h.resolver.Resources(ctx)
	if err != nil {
		return nil, resolverError(schema.GroupVersionResource{}, err)
	}
	return infos, nil
}

// resolverError is a Resolver's error about gvr (all resource types when
// zero) in the hub's errors.
func resolverError(gvr schema.GroupVersionResource, err error) error {
	var unwatchable *upstream.UnwatchableError
	var discovery *upstream.DiscoveryError
	switch {
	case errors.Is(err, upstream.ErrNotServed):
		return &ResourceError{Resource: gvr, Err: ErrUnknownResource}
	case errors.As(err, &unwatchable):
		return &RequestError{Field: FieldResource, Err: ErrInvalidRequest, Reason: unwatchable.Reason}
	case errors.As(err, &discovery) && !discovery.GroupVersion.Empty():
		// Its cause stays in the text (for the log), not in the chain,
		// which a transport reads for what to tell a client.
		return &ResourceError{Resource: discovery.GroupVersion.WithResource(""), Err: fmt.Errorf("%w: %v", ErrUnavailable, discovery)}
	case errors.As(err, &discovery):
		return fmt.Errorf("%w: %v", ErrUnavailable, discovery)
	}
	return err
}
