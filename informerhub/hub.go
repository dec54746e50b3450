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

	"github.com/informerhub/informerhub/informerhub/budget"
	"github.com/informerhub/informerhub/informerhub/celfilter"
	"github.com/informerhub/informerhub/informerhub/projection"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// Hub runs one informer per resource type and serves any number of
// subscriptions and snapshots from it. It is safe for concurrent use.
type Hub struct {
	cfg      Config
	resolver Resolver
	source   Source
	log      *slog.Logger

	ctx    context.Context // parent of every informer
	cancel context.CancelFunc

	// replaySlots holds a token per replay running (Config.MaxConcurrentReplays).
	replaySlots chan struct{}
	// replayOwners holds each owner's share of them
	// (Config.MaxReplaysPerOwner).
	replayOwners *replayShares
	// replayBytes is what stateful replays hold (Config.MaxReplayStateBytes).
	replayBytes *budget.Bytes
	// memory is what the hub holds for all resource types
	// (Config.MemoryBudget).
	memory *memory
	// filters compiles the filters of selectors, once per expression.
	filters *celfilter.Compiler
	// closers stop what New's caller started for the hub, after its
	// informers (see NewForConfig).
	closers []func()
	// disk keeps the histories on disk (Config.HistoryStore); nil without.
	disk *diskHistory
	// retainers runs the informers of Config.Retain (retain.go).
	retainers sync.WaitGroup

	mu     sync.Mutex // guards feeds, counters and closed, and each feed's refs, idleGen and idleTimer
	feeds  map[schema.GroupVersionResource]*feed
	closed bool
	// counters holds the running totals of each resource type that has had
	// a feed; they outlive feeds (see Stats).
	counters map[schema.GroupVersionResource]*resourceCounters
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

// Source opens the list and watch calls of one resource type's informer,
// cluster-wide.
type Source interface {
	ListerWatcher(info upstream.ResourceInfo) cache.ListerWatcher
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

// WatchRequest asks for a subscription.
type WatchRequest struct {
	Selector Selector
	// ResumeToken, when set, starts right after the event that carried it.
	ResumeToken string
	// SendInitialEvents first sends every matching object (as of the
	// resume token, or now), then a bookmark with InitialEventsEnd.
	SendInitialEvents bool
	// Fields keeps only these paths of each object (see projection.go);
	// empty keeps whole objects. A MODIFIED that changes none of them is
	// not sent.
	Fields []string
	// IncludePrevious makes MODIFIED events carry the state before the
	// change (Event.PreviousObject).
	IncludePrevious bool
	// Encoding is the form Config.EncodeEvent encodes the subscription's
	// events in, below MaxEncodings.
	Encoding Encoding
	// Owner names who asks, for the limits that keep one client from
	// taking what a resource type's subscribers share
	// (Config.MaxFiltersPerOwner, MaxProjectionsPerOwner). A transport
	// sets it to the caller's identity; "" is no one, and not limited.
	Owner string
}

// SnapshotRequest asks for a snapshot.
type SnapshotRequest struct {
	Selector Selector
	// Fields keeps only these paths of each object, as in WatchRequest.
	Fields []string
}

// watchParams is a validated WatchRequest.
type watchParams struct {
	sel               *selector
	proj              *projection.Projection
	tok               *token
	sendInitialEvents bool
	includePrevious   bool
	encoding          Encoding
	owner             string
}

// parseFields validates the paths of a request's fields (a projection):
// a *RequestError on FieldFields when they do not parse. It returns nil for
// none.
func parseFields(paths []string, max int) (*projection.Projection, error) {
	p, err := projection.Parse(paths, max)
	var pathErr *projection.PathError
	switch {
	case errors.As(err, &pathErr):
		return nil, &RequestError{Field: FieldFields, Err: ErrInvalidRequest, Reason: fmt.Sprintf("%q: %v", truncate(pathErr.Path), pathErr.Err)}
	case err != nil:
		return nil, &RequestError{Field: FieldFields, Err: ErrInvalidRequest, Reason: err.Error()}
	}
	return p, nil
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
		feeds:    map[schema.GroupVersionResource]*feed{},
		counters: map[schema.GroupVersionResource]*resourceCounters{},

		replaySlots:  make(chan struct{}, cfg.MaxConcurrentReplays),
		replayOwners: &replayShares{max: cfg.MaxReplaysPerOwner, byOwner: map[string]*replayShare{}},
		replayBytes:  budget.New(cfg.MaxReplayStateBytes, nil),
		memory:       newMemory(cfg.MemoryBudget),
		filters:      celfilter.NewCompiler(cfg.MaxFilterEstimatedCost, cfg.MaxFilterCost),
	}
	if cfg.HistoryStore != nil {
		h.disk = newDiskHistory(h)
	}
	for _, name := range cfg.Retain {
		h.retainers.Add(1)
		go h.retain(name)
	}
	return h
}

// Watch starts a subscription. It waits for the resource type's informer to
// sync when it is the first subscriber. Close the subscription when done.
func (h *Hub) Watch(ctx context.Context, req WatchRequest) (*Subscription, error) {
	if req.Encoding >= MaxEncodings {
		return nil, &RequestError{Field: FieldObjectFormat, Err: ErrInvalidRequest, Reason: fmt.Sprintf("encoding %d is not one the hub knows", req.Encoding)}
	}
	proj, err := parseFields(req.Fields, h.cfg.MaxFields)
	if err != nil {
		return nil, err
	}
	info, sel, err := h.prepare(ctx, req.Selector)
	if err != nil {
		return nil, err
	}
	params := &watchParams{sel: sel, proj: proj, sendInitialEvents: req.SendInitialEvents,
		includePrevious: req.IncludePrevious, encoding: req.Encoding, owner: req.Owner}
	if req.ResumeToken != "" {
		if params.tok, err = h.checkToken(req.ResumeToken, info, sel); err != nil {
			return nil, err
		}
	}
	f, err := h.acquire(ctx, info)
	if err != nil {
		return nil, err
	}
	s, err := f.subscribe(ctx, params)
	if err != nil {
		h.release(f)
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
	info, parsed, err := h.prepare(ctx, req.Selector)
	if err != nil {
		return nil, err
	}
	f, err := h.acquire(ctx, info)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	err = f.err
	if err == nil {
		err = f.refusedErrorLocked(parsed)
	}
	if err != nil {
		f.mu.Unlock()
		h.release(f)
		return nil, err
	}
	tree, _ := f.cloneForLocked(parsed)
	pos := f.pos
	f.mu.Unlock()
	return &Snapshot{
		feed:            f,
		proj:            proj,
		cursor:          newStateCursor(tree, parsed),
		resumeToken:     f.token(token{pos: pos}),
		resourceVersion: strconv.FormatUint(pos.rv, 10),
	}, nil
}

// Resources lists the resource types the cluster serves that can be watched,
// with the hub's activity on each.
func (h *Hub) Resources(ctx context.Context) ([]ResourceStatus, error) {
	infos, err := h.resources(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ResourceStatus, len(infos))
	active := map[int]*feed{}
	h.mu.Lock()
	for i, info := range infos {
		out[i].ResourceInfo = info
		if f := h.feeds[info.Resource]; f != nil && !f.isStopped() {
			out[i].InformerActive = true
			out[i].Subscribers = f.refs - f.retainedRefs
			out[i].Retained = f.retainedRefs > 0
			active[i] = f
		}
	}
	h.mu.Unlock()
	for i, f := range active {
		f.mu.Lock()
		out[i].CachedObjects = f.state.Len()
		if f.isSynced {
			out[i].HistoryEvents = f.history.len()
			out[i].HistoryBytes = f.history.bytes()
			out[i].HistoryResourceVersion = strconv.FormatUint(f.history.floorRV, 10)
			rv, at := f.oldestLocked()
			out[i].RetainedResourceVersion, out[i].RetainedSince = strconv.FormatUint(rv, 10), time.Unix(0, at)
		}
		f.mu.Unlock()
	}
	if h.disk != nil {
		// What the disk holds of the resource types with no informer.
		for i := range out {
			if _, ok := active[i]; ok {
				continue
			}
			if rv, at, ok := h.disk.window(upstream.FormatResource(out[i].Resource)); ok {
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
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	feeds := h.feeds
	h.feeds = map[schema.GroupVersionResource]*feed{}
	for _, f := range feeds {
		if f.idleTimer != nil {
			f.idleTimer.Stop()
		}
	}
	h.mu.Unlock()
	for _, f := range feeds {
		f.stop(ErrClosed)
	}
	for _, f := range feeds {
		<-f.done
	}
	h.cancel()
	h.retainers.Wait()
	if h.disk != nil {
		h.disk.close() // after every feed stopped: writes what they left
	}
	for _, c := range h.closers {
		c()
	}
}

// prepare validates a selector and resolves its resource type.
func (h *Hub) prepare(ctx context.Context, s Selector) (upstream.ResourceInfo, *selector, error) {
	if err := validateResource(s); err != nil {
		return upstream.ResourceInfo{}, nil, err
	}
	info, err := h.resolve(ctx, s.Resource)
	if err != nil {
		return upstream.ResourceInfo{}, nil, err
	}
	sel, err := parseSelector(s, info, &h.cfg, h.filters)
	if err != nil {
		return upstream.ResourceInfo{}, nil, err
	}
	if sel.filter != nil {
		h.mu.Lock()
		sel.filterErrors = &h.countersLocked(info.Resource).filterErrors
		h.mu.Unlock()
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

func (h *Hub) checkToken(s string, info upstream.ResourceInfo, sel *selector) (*token, error) {
	tok, err := decodeToken(s)
	if err != nil {
		return nil, &RequestError{Field: FieldResumeToken, Err: ErrInvalidToken, Reason: err.Error()}
	}
	if want := upstream.FormatResource(info.Resource); tok.resource != want {
		return nil, &RequestError{Field: FieldResumeToken, Err: ErrInvalidToken,
			Reason: "resume token was issued for " + strconv.Quote(tok.resource) + ", not " + strconv.Quote(want)}
	}
	if tok.initial && tok.selector != sel.fingerprint {
		return nil, &RequestError{Field: FieldResumeToken, Err: ErrInvalidToken,
			Reason: "resume token was issued during the initial events of a different selector: resume with the same namespace and selectors, or start over"}
	}
	return tok, nil
}

// acquire returns the feed of a resource type, starting its informer if it
// has none, and waits until it has synced. Every successful acquire is paired
// with a release.
func (h *Hub) acquire(ctx context.Context, info upstream.ResourceInfo) (*feed, error) {
	f, err := h.take(info)
	if err != nil {
		return nil, err
	}
	if err := f.waitSynced(ctx); err != nil {
		h.release(f)
		return nil, err
	}
	return f, nil
}

// take is acquire without waiting for the informer to sync.
func (h *Hub) take(info upstream.ResourceInfo) (*feed, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	f := h.feeds[info.Resource]
	if f == nil || f.isStopped() {
		counters := h.countersLocked(info.Resource)
		counters.starts.Add(1)
		f = newFeed(h, info, counters)
		h.feeds[info.Resource] = f
		f.start(h.ctx, h.source.ListerWatcher(info))
	}
	f.refs++
	f.idleGen++ // a pending idle stop no longer applies
	if f.idleTimer != nil {
		f.idleTimer.Stop()
		f.idleTimer = nil
	}
	h.mu.Unlock()
	return f, nil
}

// countersLocked returns the running totals of a resource type, which
// outlive its feeds. The caller holds h.mu.
func (h *Hub) countersLocked(gvr schema.GroupVersionResource) *resourceCounters {
	c := h.counters[gvr]
	if c == nil {
		c = &resourceCounters{}
		h.counters[gvr] = c
	}
	return c
}

// release undoes one acquire. The last release starts the idle timer, after
// which the informer stops unless the feed was acquired again.
func (h *Hub) release(f *feed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f.refs--
	if f.refs > 0 || h.feeds[f.info.Resource] != f {
		return
	}
	f.idleGen++
	gen := f.idleGen
	f.idleTimer = time.AfterFunc(h.cfg.IdleTimeout, func() { h.stopIfIdle(f, gen) })
}

func (h *Hub) stopIfIdle(f *feed, gen uint64) {
	h.mu.Lock()
	if f.refs > 0 || f.idleGen != gen || h.feeds[f.info.Resource] != f {
		h.mu.Unlock()
		return
	}
	delete(h.feeds, f.info.Resource)
	f.idleTimer = nil
	h.mu.Unlock()
	f.stop(errIdle)
	<-f.done
}

// errIdle is why an idle feed stopped; no subscriber ever sees it.
var errIdle = &idleError{}

type idleError struct{}

func (*idleError) Error() string { return "no subscribers for the idle timeout" }
func (*idleError) Unwrap() error { return ErrClosed }

func (h *Hub) encode(ev *Event) {
	if h.cfg.EncodeEvent != nil {
		ev.encoded = h.cfg.EncodeEvent(ev)
	}
}

// Snapshot is the matching objects of one point in time. Its methods must be
// called from one goroutine at a time.
type Snapshot struct {
	feed            *feed
	proj            *projection.Projection // nil: whole objects
	cursor          *stateCursor
	resumeToken     string
	resourceVersion string
	closeOnce       sync.Once
}

// ResumeToken is the snapshot's point in time: watching from it yields
// exactly the changes after the snapshot.
func (s *Snapshot) ResumeToken() string { return s.resumeToken }

// ResourceVersion is the Kubernetes resourceVersion of the snapshot.
func (s *Snapshot) ResourceVersion() string { return s.resourceVersion }

// NextPage returns the next page of objects as JSON, and whether it is the
// last. A page holds at most SnapshotPageSize objects and, unless it holds
// one, at most SnapshotPageBytes bytes of them. It fails only when the
// selector's filter exceeded its cost on an object (a *RequestError on
// selector.filter; see filteruse.go).
func (s *Snapshot) NextPage() (objects []string, last bool, err error) {
	cfg := &s.feed.hub.cfg
	size := 0
	for len(objects) < cfg.SnapshotPageSize {
		o := s.cursor.peek()
		if o == nil || len(objects) > 0 && size+len(o.json) > cfg.SnapshotPageBytes {
			break
		}
		s.cursor.next()
		json := o.json
		if s.proj != nil {
			if projected, err := s.proj.Apply(o.jsonBytes()); err == nil {
				json = string(projected)
			}
		}
		objects = append(objects, json)
		size += len(json)
	}
	more := s.cursor.more()
	if s.cursor.costly() {
		f := s.feed
		f.mu.Lock()
		defer f.mu.Unlock()
		f.tripLocked(s.cursor.eval.costly, s.cursor.sel)
		return nil, false, f.refusedErrorLocked(s.cursor.sel)
	}
	return objects, !more, nil
}

// Close releases the snapshot's informer.
func (s *Snapshot) Close() {
	s.closeOnce.Do(func() { s.feed.hub.release(s.feed) })
}
