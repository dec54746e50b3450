package upstream

import (
	"context"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
)

// Source lists and watches resources cluster-wide through a REST client
// that keeps objects as the API server's JSON (Object), and reads watch
// streams in one pass per event (watchdecoder.go).
type Source struct {
	client *rest.RESTClient
	// watchClient opens watches: like client, but not rate limited, as
	// client-go's Request.Watch is not (a watch is one long request).
	watchClient *rest.RESTClient
	serializer  serializer
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

// NewSource returns a Source that reaches the API server of restConfig
// through httpClient; with stripManagedFields, objects lose their
// metadata.managedFields as they are read.
func NewSource(restConfig *rest.Config, httpClient *http.Client, stripManagedFields bool) (*Source, error) {
	cfg := rest.CopyConfig(restConfig)
	cfg.ContentType = "application/json"
	cfg.AcceptContentTypes = "application/json"
	cfg.NegotiatedSerializer = newNegotiatedSerializer(stripManagedFields)
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
	return &Source{client: client, watchClient: watchClient, serializer: serializer{stripManagedFields: stripManagedFields}}, nil
}

// ListerWatcher lists and watches one resource type: cluster-wide (for an
// informer) when namespace is "", else in that namespace.
func (s *Source) ListerWatcher(info ResourceInfo, namespace string) cache.ListerWatcher {
	path := resourcePath(info.Resource, namespace)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := &ObjectList{}
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
func (s *Source) watch(ctx context.Context, path []string, opts *metav1.ListOptions) (watch.Interface, error) {
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

// resourcePath is the REST path of a resource: cluster-wide when
// namespace is "", else in that namespace.
func resourcePath(gvr schema.GroupVersionResource, namespace string) []string {
	path := []string{"/apis", gvr.Group, gvr.Version}
	if gvr.Group == "" {
		path = []string{"/api", gvr.Version}
	}
	if namespace != "" {
		path = append(path, "namespaces", namespace)
	}
	return append(path, gvr.Resource)
}
