package informerhub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
)

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
	source, err := newKubeSource(restConfig, httpClient, cfg.StripManagedFields)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	crds := newCRDFields(source, logger)
	resolver := NewDiscoveryResolver(discoveryClient, DiscoveryResolverConfig{Logger: logger, crds: crds})
	h := New(cfg, resolver, source)
	crds.start()
	h.closers = append(h.closers, crds.stop)
	return h, nil
}

// kubeSource lists and watches resources through a REST client that keeps
// objects as raw JSON (see rawjson.go), and reads watch streams in one pass
// per event (watchdecoder.go).
type kubeSource struct {
	client *rest.RESTClient
	// watchClient opens watches: like client, but not rate limited, as
	// client-go's Request.Watch is not (a watch is one long request).
	watchClient *rest.RESTClient
	serializer  rawSerializer
}

var (
	parameterScheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		metav1.AddToGroupVersion(s, versionV1)
		return s
	}()
	parameterCodec = runtime.NewParameterCodec(parameterScheme)
	versionV1      = schema.GroupVersion{Version: "v1"}
)

func newKubeSource(restConfig *rest.Config, httpClient *http.Client, stripManagedFields bool) (*kubeSource, error) {
	cfg := rest.CopyConfig(restConfig)
	cfg.ContentType = "application/json"
	cfg.AcceptContentTypes = "application/json"
	cfg.NegotiatedSerializer = newRawNegotiatedSerializer(stripManagedFields)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "informerhub"
	}
	client, err := rest.UnversionedRESTClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes REST client: %w", err)
	}
	watchCfg := rest.CopyConfig(cfg)
	watchCfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	watchClient, err := rest.UnversionedRESTClientForConfigAndClient(watchCfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes REST client: %w", err)
	}
	return &kubeSource{client: client, watchClient: watchClient, serializer: rawSerializer{stripManagedFields: stripManagedFields}}, nil
}

func (s *kubeSource) ListerWatcher(info ResourceInfo) cache.ListerWatcher {
	path := resourcePath(info.Resource)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := &rawObjectList{}
			err := s.client.Get().AbsPath(path...).
				SpecificallyVersionedParams(&opts, parameterCodec, versionV1).
				Do(ctx).Into(list)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			return s.watch(ctx, path, &opts)
		},
	}
}

// Like Request.Watch, a watch whose connection drops before it answers is
// tried again, up to watchRetries times a second apart.
const (
	watchRetries    = 10
	watchRetryAfter = time.Second
)

// watch opens a watch and reads it with watchDecoder. It does what
// client-go's Request.Watch does around its decoding: no rate limit (see
// watchClient), retries while the connection drops before the API server
// answers, then an empty watch, from which the reflector watches again from
// where it was; API errors (410 Gone) are returned as they are.
func (s *kubeSource) watch(ctx context.Context, path []string, opts *metav1.ListOptions) (watch.Interface, error) {
	for attempt := 0; ; attempt++ {
		body, err := s.watchClient.Get().AbsPath(path...).
			SpecificallyVersionedParams(opts, parameterCodec, versionV1).
			Stream(ctx)
		if err == nil {
			return watch.NewStreamWatcherWithLogger(klog.FromContext(ctx), newWatchDecoder(body, s.serializer),
				// As Request.Watch reports an event it cannot decode.
				apierrors.NewClientErrorReporter(http.StatusInternalServerError, http.MethodGet, "ClientWatchDecoding")), nil
		}
		if !utilnet.IsProbableEOF(err) && !utilnet.IsTimeout(err) {
			return nil, err
		}
		if attempt == watchRetries {
			return watch.NewEmptyWatch(), nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(watchRetryAfter):
		}
	}
}

// resourcePath is the cluster-wide REST path of a resource.
func resourcePath(gvr schema.GroupVersionResource) []string {
	if gvr.Group == "" {
		return []string{"/api", gvr.Version, gvr.Resource}
	}
	return []string{"/apis", gvr.Group, gvr.Version, gvr.Resource}
}

// DiscoveryResolverConfig tunes a discovery-backed Resolver.
type DiscoveryResolverConfig struct {
	// MissRefreshInterval is how often a lookup that misses may ask the API
	// server again about that group version. A resource created after the
	// last ask (a new CRD) is found once this much time has passed.
	// Default: 1s.
	MissRefreshInterval time.Duration
	// ListTTL is how long the list of all resource types is reused.
	// Default: 10s.
	ListTTL time.Duration
	// Logger receives discovery problems. Default: slog.Default().
	Logger *slog.Logger

	// crds, when set, tells the fields of custom resources; without it,
	// every resource type gets the fields of built-in ones.
	crds *crdFields
}

func (c *DiscoveryResolverConfig) setDefaults() {
	if c.MissRefreshInterval <= 0 {
		c.MissRefreshInterval = time.Second
	}
	if c.ListTTL <= 0 {
		c.ListTTL = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// NewDiscoveryResolver returns a Resolver that asks the API server's discovery
// and caches the answers.
func NewDiscoveryResolver(client discovery.ServerResourcesInterfaceWithContext, cfg DiscoveryResolverConfig) Resolver {
	cfg.setDefaults()
	return &discoveryResolver{
		client:        client,
		cfg:           cfg,
		groupVersions: map[schema.GroupVersion]groupVersionResources{},
	}
}

type discoveryResolver struct {
	client discovery.ServerResourcesInterfaceWithContext
	cfg    DiscoveryResolverConfig
	calls  singleflight.Group

	mu            sync.Mutex // guards groupVersions, all and allFetched
	groupVersions map[schema.GroupVersion]groupVersionResources
	all           []ResourceInfo
	allFetched    time.Time
}

// maxGroupVersions bounds the discovery answers kept: far more than any
// cluster serves, so only answers for group versions it does not serve are
// ever dropped.
const maxGroupVersions = 4096

// groupVersionResources is what discovery said about one group version:
// nil resources means the API server does not serve it.
type groupVersionResources struct {
	resources map[string]metav1.APIResource
	fetched   time.Time
}

func (r *discoveryResolver) Resolve(ctx context.Context, gvr schema.GroupVersionResource) (ResourceInfo, error) {
	info, err := r.resolve(ctx, gvr)
	if err != nil {
		return info, err
	}
	if info.Fields, err = r.fields(ctx, gvr); err != nil {
		return ResourceInfo{}, err
	}
	return info, nil
}

// fields returns the fields of a resource type: its CRD's, or a built-in
// type's.
func (r *discoveryResolver) fields(ctx context.Context, gvr schema.GroupVersionResource) (*FieldSet, error) {
	if r.cfg.crds != nil {
		set, isCRD, err := r.cfg.crds.fields(ctx, gvr)
		switch {
		case err != nil:
			return nil, err
		case isCRD:
			return set, nil
		}
	}
	return BuiltinFields(gvr), nil
}

func (r *discoveryResolver) resolve(ctx context.Context, gvr schema.GroupVersionResource) (ResourceInfo, error) {
	gv := gvr.GroupVersion()
	r.mu.Lock()
	entry, known := r.groupVersions[gv]
	r.mu.Unlock()
	if res, ok := entry.resources[gvr.Resource]; ok {
		return resourceInfo(gv, res)
	}
	if !known || time.Since(entry.fetched) >= r.cfg.MissRefreshInterval {
		var err error
		if entry, err = r.refresh(ctx, gv); err != nil {
			return ResourceInfo{}, err
		}
	}
	res, ok := entry.resources[gvr.Resource]
	if !ok {
		return ResourceInfo{}, &ResourceError{Resource: gvr, Err: ErrUnknownResource}
	}
	return resourceInfo(gv, res)
}

// refresh asks discovery about one group version. Concurrent misses of the
// same group version share one request.
func (r *discoveryResolver) refresh(ctx context.Context, gv schema.GroupVersion) (groupVersionResources, error) {
	ch := r.calls.DoChan(gv.String(), func() (any, error) {
		// The shared call must not die with the first caller's context.
		callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		list, err := r.client.ServerResourcesForGroupVersionWithContext(callCtx, gv.String())
		entry := groupVersionResources{fetched: time.Now()}
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, &ResourceError{Resource: gv.WithResource(""), Err: fmt.Errorf("%w: discovery of %s failed: %v", ErrUnavailable, gv, err)}
		default:
			entry.resources = make(map[string]metav1.APIResource, len(list.APIResources))
			for _, res := range list.APIResources {
				entry.resources[res.Name] = res
			}
		}
		r.mu.Lock()
		if len(r.groupVersions) >= maxGroupVersions {
			// Clients can name any number of group versions; only the
			// cluster's are worth keeping. The answers for the rest only
			// rate-limit repeated asks, so dropping them is safe.
			for gv, e := range r.groupVersions {
				if e.resources == nil {
					delete(r.groupVersions, gv)
				}
			}
		}
		r.groupVersions[gv] = entry
		r.mu.Unlock()
		return entry, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return groupVersionResources{}, res.Err
		}
		return res.Val.(groupVersionResources), nil
	case <-ctx.Done():
		return groupVersionResources{}, ctx.Err()
	}
}

// resourceInfo checks that a discovered resource can be watched.
func resourceInfo(gv schema.GroupVersion, res metav1.APIResource) (ResourceInfo, error) {
	gvr := gv.WithResource(res.Name)
	if strings.Contains(res.Name, "/") {
		return ResourceInfo{}, &RequestError{Field: FieldResource, Err: ErrInvalidRequest,
			Reason: fmt.Sprintf("%s is a subresource; only resources can be watched", res.Name)}
	}
	if !watchable(res) {
		return ResourceInfo{}, &RequestError{Field: FieldResource, Err: ErrInvalidRequest,
			Reason: fmt.Sprintf("resource %s does not support list and watch (its verbs are %v)", FormatResource(gvr), res.Verbs)}
	}
	return ResourceInfo{Resource: gvr, Kind: res.Kind, Namespaced: res.Namespaced}, nil
}

func watchable(res metav1.APIResource) bool {
	return !strings.Contains(res.Name, "/") && slices.Contains(res.Verbs, "list") && slices.Contains(res.Verbs, "watch")
}

func (r *discoveryResolver) Resources(ctx context.Context) ([]ResourceInfo, error) {
	all, err := r.resources(ctx)
	if err != nil {
		return nil, err
	}
	// Fields are looked up per call: the list is reused for ListTTL, but
	// a CRD's selectable fields may change in between.
	out := slices.Clone(all)
	for i := range out {
		if out[i].Fields, err = r.fields(ctx, out[i].Resource); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (r *discoveryResolver) resources(ctx context.Context) ([]ResourceInfo, error) {
	r.mu.Lock()
	if r.all != nil && time.Since(r.allFetched) < r.cfg.ListTTL {
		all := r.all
		r.mu.Unlock()
		return all, nil
	}
	r.mu.Unlock()

	ch := r.calls.DoChan("\x00all", func() (any, error) {
		callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, lists, err := r.client.ServerGroupsAndResourcesWithContext(callCtx)
		var partial *discovery.ErrGroupDiscoveryFailed
		switch {
		case errors.As(err, &partial):
			// Serve what answered; an unavailable aggregated API must not hide the rest.
			r.cfg.Logger.Warn("some API groups failed discovery", "error", err)
		case err != nil:
			return nil, fmt.Errorf("%w: discovery failed: %v", ErrUnavailable, err)
		}
		now := time.Now()
		var all []ResourceInfo
		fresh := map[schema.GroupVersion]groupVersionResources{}
		for _, list := range lists {
			gv, err := schema.ParseGroupVersion(list.GroupVersion)
			if err != nil {
				continue
			}
			entry := groupVersionResources{resources: map[string]metav1.APIResource{}, fetched: now}
			for _, res := range list.APIResources {
				entry.resources[res.Name] = res
				if watchable(res) {
					all = append(all, ResourceInfo{Resource: gv.WithResource(res.Name), Kind: res.Kind, Namespaced: res.Namespaced})
				}
			}
			fresh[gv] = entry
		}
		slices.SortFunc(all, func(a, b ResourceInfo) int { return compareResources(a.Resource, b.Resource) })
		r.mu.Lock()
		defer r.mu.Unlock()
		for gv, entry := range fresh {
			r.groupVersions[gv] = entry
		}
		r.all, r.allFetched = all, now
		return all, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.([]ResourceInfo), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func compareResources(a, b schema.GroupVersionResource) int {
	if c := strings.Compare(a.Group, b.Group); c != 0 {
		return c
	}
	if c := strings.Compare(a.Version, b.Version); c != 0 {
		return c
	}
	return strings.Compare(a.Resource, b.Resource)
}

// FormatResource names a resource type the way kubectl does: "configmaps.v1",
// "deployments.v1.apps".
func FormatResource(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Resource + "." + gvr.Version
	}
	return gvr.Resource + "." + gvr.Version + "." + gvr.Group
}
