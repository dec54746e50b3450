package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/informerhub/informerhub/informerhub/fieldset"
)

// DiscoveryConfig tunes a Discovery.
type DiscoveryConfig struct {
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

	// CRDs, when set, tells the fields of custom resources; without it,
	// every resource type gets the fields of built-in ones.
	CRDs *CRDFields
}

func (c *DiscoveryConfig) setDefaults() {
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

// NewDiscovery returns a Discovery that asks the API server's discovery
// through client.
func NewDiscovery(client discovery.ServerResourcesInterfaceWithContext, cfg DiscoveryConfig) *Discovery {
	cfg.setDefaults()
	return &Discovery{
		client:        client,
		cfg:           cfg,
		groupVersions: map[schema.GroupVersion]groupVersionResources{},
	}
}

// Discovery tells which resource types the cluster serves, as the API
// server's discovery says, and caches its answers. It is safe for
// concurrent use.
type Discovery struct {
	client discovery.ServerResourcesInterfaceWithContext
	cfg    DiscoveryConfig
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

// Resolve returns what the cluster serves under gvr: an error matching
// ErrNotServed when nothing, an *UnwatchableError when it cannot be listed
// and watched, a *DiscoveryError when discovery failed.
func (r *Discovery) Resolve(ctx context.Context, gvr schema.GroupVersionResource) (ResourceInfo, error) {
	info, err := r.resolve(ctx, gvr)
	if err != nil {
		return info, err
	}
	if err := r.describe(ctx, &info); err != nil {
		return ResourceInfo{}, err
	}
	return info, nil
}

// describe sets what a resource type's CRD says of it (its fields and
// printer columns), or a built-in type's fields.
func (r *Discovery) describe(ctx context.Context, info *ResourceInfo) error {
	if r.cfg.CRDs != nil {
		v, isCRD, err := r.cfg.CRDs.version(ctx, info.Resource)
		switch {
		case err != nil:
			return err
		case isCRD:
			info.Fields, info.PrinterColumns = v.fields, v.columns
			return nil
		}
	}
	info.Fields, info.PrinterColumns = fieldset.Builtin(info.Resource), nil
	return nil
}

func (r *Discovery) resolve(ctx context.Context, gvr schema.GroupVersionResource) (ResourceInfo, error) {
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
		return ResourceInfo{}, fmt.Errorf("%w: %s", ErrNotServed, FormatResource(gvr))
	}
	return resourceInfo(gv, res)
}

// refresh asks discovery about one group version. Concurrent misses of the
// same group version share one request.
func (r *Discovery) refresh(ctx context.Context, gv schema.GroupVersion) (groupVersionResources, error) {
	ch := r.calls.DoChan(gv.String(), func() (any, error) {
		// The shared call must not die with the first caller's context.
		callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		list, err := r.client.ServerResourcesForGroupVersionWithContext(callCtx, gv.String())
		entry := groupVersionResources{fetched: time.Now()}
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, &DiscoveryError{GroupVersion: gv, Err: err}
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
		return ResourceInfo{}, &UnwatchableError{Reason: fmt.Sprintf("%s is a subresource; only resources can be watched", res.Name)}
	}
	if !watchable(res) {
		return ResourceInfo{}, &UnwatchableError{Reason: fmt.Sprintf("resource %s does not support list and watch (its verbs are %v)", FormatResource(gvr), res.Verbs)}
	}
	return infoOf(gv, res), nil
}

func watchable(res metav1.APIResource) bool {
	return !strings.Contains(res.Name, "/") && slices.Contains(res.Verbs, "list") && slices.Contains(res.Verbs, "watch")
}

// Resources lists every resource type that can be listed and watched, in
// the order of their group, version and name: a *DiscoveryError when
// discovery failed. Group versions that failed discovery (an aggregated API
// that is down) are left out, and logged.
func (r *Discovery) Resources(ctx context.Context) ([]ResourceInfo, error) {
	all, err := r.resources(ctx)
	if err != nil {
		return nil, err
	}
	// Fields and columns are looked up per call: the list is reused for
	// ListTTL, but a CRD's selectable fields and columns may change in
	// between.
	out := slices.Clone(all)
	for i := range out {
		if err := r.describe(ctx, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (r *Discovery) resources(ctx context.Context) ([]ResourceInfo, error) {
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
			return nil, &DiscoveryError{Err: err}
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
					all = append(all, infoOf(gv, res))
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
