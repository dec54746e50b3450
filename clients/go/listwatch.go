package hubclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// ListerWatcherOption configures a ListerWatcher.
type ListerWatcherOption func(*ListerWatcher)

// WithScheme decodes objects into the typed objects of scheme (for example
// k8s.io/client-go/kubernetes/scheme.Scheme for built-in types), instead of
// *unstructured.Unstructured.
func WithScheme(scheme *runtime.Scheme) ListerWatcherOption {
	return func(lw *ListerWatcher) {
		lw.scheme = scheme
		lw.decoder = serializer.NewCodecFactory(scheme).UniversalDeserializer()
	}
}

// ListerWatcher returns a client-go ListerWatcher served by the hub, so that
// a stock SharedIndexInformer, and anything built on it, runs against the
// hub instead of the API server:
//
//	lw := client.ListerWatcher(hubclient.Selector{Resource: gvr})
//	informer := cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, cache.Indexers{})
//
// Its List is a Snapshot and its Watch a hub Watch. The resourceVersions the
// reflector resumes from are mapped to hub tokens; one the hub can no longer
// resume from is answered with the 410 Gone the reflector understands, so it
// lists again, while errors a retry can fix (a replica down, a rate limit)
// are the 429 on which it backs off and watches again from where it was.
// Objects keep their Kubernetes resourceVersions, so they can be used for
// updates. Label and field selectors of the reflector's ListOptions are
// combined with sel's, and go to the hub, which selects as the API server
// would: a field selector may name any field the resource type supports
// (an informer of one node's pods: "spec.nodeName=node-1"). sel.Filter
// applies too; objects that stop matching any of them reach the informer
// as deletions.
func (c *Client) ListerWatcher(sel Selector, opts ...ListerWatcherOption) *ListerWatcher {
	lw := &ListerWatcher{client: c, sel: sel, tokens: newTokenIndex(4096)}
	for _, o := range opts {
		o(lw)
	}
	return lw
}

// ListerWatcher lists and watches through the hub for a client-go
// reflector. It implements cache.ListerWatcher and, preferred by the
// reflector, cache.ListerWatcherWithContext.
type ListerWatcher struct {
	client  *Client
	sel     Selector
	scheme  *runtime.Scheme // nil: objects are *unstructured.Unstructured
	decoder runtime.Decoder

	mu  sync.Mutex // guards gvk, failures, listed, hasListed and delivered
	gvk schema.GroupVersionKind
	// failures counts the watches in a row that could not be opened or
	// ended before the hub established them, for the log.
	failures int
	// listed is the selection the reflector listed last, with its
	// ListOptions' selectors: the one VerifyCache checks.
	listed    Selector
	hasListed bool
	// delivered is the token of the position the reflector received
	// last: its list's, or its last event's.
	delivered string
	tokens    *tokenIndex
}

var (
	_ cache.ListerWatcher            = (*ListerWatcher)(nil)
	_ cache.ListerWatcherWithContext = (*ListerWatcher)(nil)
)

// List lists with context.Background; the reflector calls ListWithContext.
func (lw *ListerWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

// Watch watches with context.Background; the reflector calls
// WatchWithContext.
func (lw *ListerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported tells the reflector to List, then Watch:
// the hub's Snapshot is its list.
func (lw *ListerWatcher) IsWatchListSemanticsUnSupported() bool { return true }

// selector is lw's Selector with what opts adds: label and field
// selectors, and a shard selector (ListOptions.ShardSelector, which stock
// informers set to shard), which cannot be combined with another.
func (lw *ListerWatcher) selector(opts metav1.ListOptions) (Selector, error) {
	sel := lw.sel
	sel.LabelSelector = joinSelectors(sel.LabelSelector, opts.LabelSelector)
	sel.FieldSelector = joinSelectors(sel.FieldSelector, opts.FieldSelector)
	if opts.ShardSelector != "" {
		if sel.ShardSelector != "" && sel.ShardSelector != opts.ShardSelector {
			return Selector{}, fmt.Errorf("the ListerWatcher's selector has the shard selector %q, and its ListOptions %q: one can be used", sel.ShardSelector, opts.ShardSelector)
		}
		sel.ShardSelector = opts.ShardSelector
	}
	return sel, nil
}

func joinSelectors(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "," + b
}

func (lw *ListerWatcher) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	sel, err := lw.selector(opts)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	snap, err := lw.client.Snapshot(ctx, sel)
	if err != nil {
		return nil, apiError(err)
	}
	list := &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: snap.ResourceVersion}}
	for _, data := range snap.Objects {
		obj, err := lw.decode(data)
		if err != nil {
			return nil, err
		}
		list.Items = append(list.Items, runtime.RawExtension{Object: obj})
	}
	lw.tokens.put(snap.ResourceVersion, snap.ResumeToken)
	lw.mu.Lock()
	lw.listed, lw.hasListed, lw.delivered = sel, true, snap.ResumeToken
	lw.mu.Unlock()
	return list, nil
}

// deliver records that the reflector received the position of token.
func (lw *ListerWatcher) deliver(token string) {
	lw.mu.Lock()
	lw.delivered = token
	lw.mu.Unlock()
}

// deliveredToken is the token of the position the reflector received
// last.
func (lw *ListerWatcher) deliveredToken() string {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.delivered
}

// WatchWithContext opens a hub Watch from the resourceVersion the reflector
// gives ("" or "0": from now), on the current replica or the next that
// answers. It ends after opts.TimeoutSeconds, as the API server's would.
func (lw *ListerWatcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	sel, err := lw.selector(opts)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	req := &informerhubv1.WatchRequest{Selector: sel.proto()}
	if rv := opts.ResourceVersion; rv != "" && rv != "0" {
		token, ok := lw.tokens.get(rv)
		if !ok {
			return nil, apierrors.NewResourceExpired(fmt.Sprintf(
				"resourceVersion %q was not delivered by this hub client: list again", rv))
		}
		req.ResumeToken = token
	}
	var cancel context.CancelFunc
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*opts.TimeoutSeconds)*time.Second)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	stream, err := retry(ctx, lw.client, func(svc informerhubv1.InformerHubServiceClient) (grpc.ServerStreamingClient[informerhubv1.WatchResponse], error) {
		return svc.Watch(ctx, req)
	})
	if err != nil {
		if ctx.Err() == nil { // not stopped, nor timed out
			lw.watchFailed(err, false)
		}
		cancel()
		return nil, apiError(err)
	}
	w := &hubWatch{result: make(chan watch.Event), cancel: cancel, done: make(chan struct{}), bookmarks: opts.AllowWatchBookmarks}
	go w.run(ctx, lw, stream)
	return w, nil
}

// watchFailed logs why a watch could not be opened, or its stream ended
// (running: after the hub had established it), when the reflector retries
// it: a 429, on which the reflector backs off and watches again. The
// reflector logs those only at verbosity 2 and 4, so an informer of a hub
// that is down would otherwise be silent until it is back. As a Watcher
// does, the end of a running stream is logged at info, and every attempt
// that fails after it at warn, with its number; the backoff is the
// reflector's, not known here.
func (lw *ListerWatcher) watchFailed(err error, running bool) {
	if !apierrors.IsTooManyRequests(apiError(err)) {
		return // the reflector relists, or logs the error itself
	}
	st := status.Convert(err)
	log := lw.log().With("code", st.Code().String(), "error", st.Message())
	lw.mu.Lock()
	if running {
		lw.failures = 0
	} else {
		lw.failures++
	}
	attempt := lw.failures
	lw.mu.Unlock()
	if running {
		log.Info("watch interrupted; the reflector reconnects after its backoff")
		return
	}
	log.Warn("not connected to the hub; the reflector retries after its backoff", "attempt", attempt)
}

// watchEstablished records that the hub established a watch, and says so
// if it took attempts.
func (lw *ListerWatcher) watchEstablished() {
	lw.mu.Lock()
	attempts := lw.failures
	lw.failures = 0
	lw.mu.Unlock()
	if attempts > 0 {
		lw.log().Info("reconnected to the hub", "attempts", attempts)
	}
}

// log is the client's logger, with the resource and namespace watched.
func (lw *ListerWatcher) log() *slog.Logger {
	return lw.client.cfg.log.With("resource", lw.sel.Resource.String(), "namespace", lw.sel.Namespace)
}

// decode turns an object's JSON into what the informer expects.
func (lw *ListerWatcher) decode(data []byte) (runtime.Object, error) {
	var obj runtime.Object
	if lw.decoder != nil {
		o, _, err := lw.decoder.Decode(data, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("hubclient: decoding an object: %w", err)
		}
		obj = o
	} else {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return nil, fmt.Errorf("hubclient: decoding an object: %w", err)
		}
		obj = u
	}
	lw.mu.Lock()
	if lw.gvk.Empty() {
		lw.gvk = obj.GetObjectKind().GroupVersionKind()
	}
	lw.mu.Unlock()
	return obj, nil
}

// bookmark makes the object of a BOOKMARK event: an empty object of the
// resource's kind at resourceVersion, as the API server sends.
func (lw *ListerWatcher) bookmark(ctx context.Context, resourceVersion string) (runtime.Object, error) {
	lw.mu.Lock()
	gvk := lw.gvk
	lw.mu.Unlock()
	if gvk.Empty() {
		// No object seen yet: ask the hub for the resource's kind.
		resources, err := lw.client.ListResources(ctx, lw.sel.Namespace)
		if err != nil {
			return nil, err
		}
		for _, r := range resources {
			if r.GroupVersionResource == lw.sel.Resource {
				gvk = lw.sel.Resource.GroupVersion().WithKind(r.Kind)
			}
		}
		lw.mu.Lock()
		lw.gvk = gvk
		lw.mu.Unlock()
	}
	var obj runtime.Object = &unstructured.Unstructured{}
	if lw.scheme != nil {
		typed, err := lw.scheme.New(gvk)
		if err != nil {
			return nil, err
		}
		obj = typed
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	m.SetResourceVersion(resourceVersion)
	return obj, nil
}

// hubWatch is a hub Watch as a watch.Interface.
type hubWatch struct {
	result    chan watch.Event
	cancel    context.CancelFunc
	done      chan struct{}
	bookmarks bool // the reflector asked for bookmarks
}

func (w *hubWatch) ResultChan() <-chan watch.Event { return w.result }

// Stop ends the watch and waits until its goroutine has closed the result
// channel.
func (w *hubWatch) Stop() {
	w.cancel()
	<-w.done
}

func (w *hubWatch) run(ctx context.Context, lw *ListerWatcher, stream grpc.ServerStreamingClient[informerhubv1.WatchResponse]) {
	defer close(w.done)
	defer close(w.result)
	// The hub sends the headers once it established the stream, before
	// any event: a quiet watch has reconnected too.
	running := false
	if md, err := stream.Header(); err == nil && md != nil {
		lw.watchEstablished()
		running = true
	}
	send := func(e watch.Event) bool {
		select {
		case w.result <- e:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return // stopped, or timed out: the reflector watches again
			}
			lw.watchFailed(err, running)
			if status.Code(err) == codes.Unavailable {
				lw.client.failed(lw.client.currentEndpoint())
			}
			// 410 makes the reflector relist, 429 back off and watch again
			// from where it was; see apiError.
			var apiStatus apierrors.APIStatus
			if errors.As(apiError(err), &apiStatus) {
				st := apiStatus.Status()
				send(watch.Event{Type: watch.Error, Object: &st})
			}
			return
		}
		e := eventOf(resp)
		if e.Type == Bookmark && !w.bookmarks {
			lw.deliver(e.ResumeToken) // the store's state has that position too
			continue
		}
		var obj runtime.Object
		if e.Type == Bookmark {
			obj, err = lw.bookmark(ctx, e.ResourceVersion)
		} else {
			obj, err = lw.decode(e.Object)
		}
		if err != nil {
			send(watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(err).ErrStatus})
			return
		}
		if m, err := meta.Accessor(obj); err == nil {
			// The reflector resumes from the resourceVersion of the last
			// object it processed: remember which token that is.
			lw.tokens.put(m.GetResourceVersion(), e.ResumeToken)
		}
		if !send(watch.Event{Type: watch.EventType(e.Type), Object: obj}) {
			return
		}
		lw.deliver(e.ResumeToken)
	}
}

// apiError turns a hub error into the API error a reflector understands.
func apiError(err error) error {
	st := status.Convert(err)
	switch st.Code() {
	case codes.OutOfRange:
		return apierrors.NewResourceExpired(st.Message())
	case codes.NotFound:
		return apierrors.NewNotFound(schema.GroupResource{}, st.Message())
	case codes.PermissionDenied:
		return apierrors.NewForbidden(schema.GroupResource{}, "", errors.New(st.Message()))
	case codes.Unauthenticated:
		return apierrors.NewUnauthorized(st.Message())
	case codes.InvalidArgument:
		return apierrors.NewBadRequest(st.Message())
	}
	// UNAVAILABLE, RESOURCE_EXHAUSTED and the rest: a 429, on which the
	// reflector backs off and watches again from where it was, instead of
	// relisting everything.
	return apierrors.NewTooManyRequests(st.Message(), 1)
}

// tokenIndex remembers the hub token for each resourceVersion delivered to
// the reflector, for the most recent ones. The latest token wins: it is the
// one the reflector's position matches.
type tokenIndex struct {
	mu    sync.Mutex // guards all fields
	size  int
	byRV  map[string]string
	order []string // ring of resourceVersions, oldest first from next
	next  int
}

func newTokenIndex(size int) *tokenIndex {
	return &tokenIndex{size: size, byRV: make(map[string]string, size)}
}

func (t *tokenIndex) put(rv, token string) {
	if rv == "" || token == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.byRV[rv]; !ok {
		if len(t.order) < t.size {
			t.order = append(t.order, rv)
		} else {
			delete(t.byRV, t.order[t.next])
			t.order[t.next] = rv
			t.next = (t.next + 1) % t.size
		}
	}
	t.byRV[rv] = token
}

func (t *tokenIndex) get(rv string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	token, ok := t.byRV[rv]
	return token, ok
}

// StopOnUnauthorized is a reflector's error handler (for
// SharedIndexInformer.SetWatchErrorHandlerWithContext) that logs each error
// as client-go's default handler does, and ends the informer by calling
// cancel with the error once the hub refuses the caller's credentials (a
// 401: a token the cluster rejects, expired or revoked). A reflector
// retries every error with a backoff, for ever, as it does against the API
// server; a rejected token would otherwise be a warning logged every few
// seconds. Run the informer with the context cancel ends:
//
//	ctx, cancel := context.WithCancelCause(ctx)
//	informer.SetWatchErrorHandlerWithContext(hubclient.StopOnUnauthorized(cancel))
//	go informer.RunWithContext(ctx)
//	<-ctx.Done()
//	err := context.Cause(ctx) // the 401, with the hub's message
func StopOnUnauthorized(cancel context.CancelCauseFunc) cache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		if apierrors.IsUnauthorized(err) {
			cancel(fmt.Errorf("hubclient: the hub refused the credentials: %w", err))
		}
	}
}
