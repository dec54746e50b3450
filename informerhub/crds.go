package informerhub

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// crdFields keeps the selectable fields of every CustomResourceDefinition,
// from one informer on CRDs, so that field selectors on custom resources
// mean what the API server makes of them, and follow a CRD's changes: a
// field added to a version's selectableFields is accepted once the informer
// has seen the change.
//
// A custom resource accepts metadata.name, metadata.namespace when it is
// namespaced, and the selectableFields of the version asked for (named by
// their jsonPath without its leading dot); each value is the one at that
// path, a string, integer or boolean as its JSON text, "" when absent.
// (apiextensions-apiserver pkg/apiserver/conversion/converter.go and
// pkg/registry/customresource/strategy.go.)
type crdFields struct {
	informer cache.SharedIndexInformer
	// handled is the handler's registration: it has synced once the
	// handler has taken every object of the first list into byName, which
	// the informer's own HasSynced (its store) does not wait for.
	handled cache.ResourceEventHandlerRegistration
	log     *slog.Logger
	cancel  context.CancelFunc
	done    chan struct{}
	synced  chan struct{} // closed once the informer has listed, or has given up waiting (failed)

	mu     sync.Mutex // guards byName and syncedClosed
	byName map[string]crdVersions
	// syncedClosed is set when synced is closed: when the informer has
	// listed, or when its first list failed (the hub may not be allowed to
	// read CRDs): custom resources then get metadata fields only, rather
	// than every request waiting.
	syncedClosed bool
}

// crdVersions is what the hub keeps of one CRD.
type crdVersions struct {
	namespaced bool
	versions   map[string]*FieldSet
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crdSummary is the part of a CRD that field selectors need.
type crdSummary struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Scope    string `json:"scope"`
		Versions []struct {
			Name             string `json:"name"`
			SelectableFields []struct {
				JSONPath string `json:"jsonPath"`
			} `json:"selectableFields"`
		} `json:"versions"`
	} `json:"spec"`
}

func newCRDFields(source Source, log *slog.Logger) *crdFields {
	c := &crdFields{
		log:    log.With("resource", FormatResource(crdResource)),
		done:   make(chan struct{}),
		synced: make(chan struct{}),
		byName: map[string]crdVersions{},
	}
	c.informer = cache.NewSharedIndexInformer(source.ListerWatcher(ResourceInfo{Resource: crdResource}), &rawObject{}, 0, cache.Indexers{})
	// A CRD's schema can be large; only what crdSummary holds is kept.
	_ = c.informer.SetTransform(func(obj any) (any, error) {
		raw, ok := obj.(*rawObject)
		if !ok {
			return obj, nil
		}
		var summary crdSummary
		if err := json.Unmarshal(raw.JSON, &summary); err != nil {
			return nil, err
		}
		compact, err := json.Marshal(summary)
		if err != nil {
			return nil, err
		}
		out := &rawObject{JSON: compact}
		out.Name, out.ResourceVersion = raw.Name, raw.ResourceVersion
		return out, nil
	})
	c.handled, _ = c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.put,
		UpdateFunc: func(_, obj any) { c.put(obj) },
		DeleteFunc: c.delete,
	})
	_ = c.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.syncedClosed {
			c.log.Warn("cannot list CustomResourceDefinitions: field selectors on custom resources accept metadata fields only until it can", "error", err)
			c.closeSyncedLocked()
		}
	})
	return c
}

func (c *crdFields) closeSyncedLocked() {
	if !c.syncedClosed {
		c.syncedClosed = true
		close(c.synced)
	}
}

// start runs the informer until stop.
func (c *crdFields) start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	var wg sync.WaitGroup
	wg.Go(func() { c.informer.RunWithContext(ctx) })
	wg.Go(func() {
		if cache.WaitForCacheSync(ctx.Done(), c.handled.HasSynced) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.closeSyncedLocked()
		}
	})
	go func() {
		wg.Wait()
		close(c.done)
	}()
}

func (c *crdFields) stop() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
}

func (c *crdFields) put(obj any) {
	raw, ok := obj.(*rawObject)
	if !ok {
		return
	}
	var summary crdSummary
	if err := json.Unmarshal(raw.JSON, &summary); err != nil {
		c.log.Warn("cannot read a CustomResourceDefinition", "name", raw.Name, "error", err)
		return
	}
	entry := crdVersions{namespaced: summary.Spec.Scope == "Namespaced", versions: map[string]*FieldSet{}}
	for _, v := range summary.Spec.Versions {
		var paths []string
		for _, f := range v.SelectableFields {
			paths = append(paths, f.JSONPath)
		}
		entry.versions[v.Name] = CRDFields(entry.namespaced, paths)
	}
	c.mu.Lock()
	c.byName[summary.Metadata.Name] = entry
	c.mu.Unlock()
}

func (c *crdFields) delete(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if raw, ok := obj.(*rawObject); ok {
		c.mu.Lock()
		delete(c.byName, raw.Name)
		c.mu.Unlock()
	}
}

// fields returns the FieldSet of a custom resource, or false when no CRD
// defines gvr. It waits until the informer has listed the CRDs.
func (c *crdFields) fields(ctx context.Context, gvr schema.GroupVersionResource) (*FieldSet, bool, error) {
	if gvr.Group == "" {
		return nil, false, nil // the core group has no custom resources
	}
	select {
	case <-c.synced:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	entry, ok := c.byName[gvr.Resource+"."+gvr.Group]
	if !ok {
		return nil, false, nil
	}
	set, ok := entry.versions[gvr.Version]
	if !ok {
		set = CRDFields(entry.namespaced, nil)
	}
	return set, true, nil
}

// CRDFields returns the fields field selectors may name on a custom
// resource version whose CRD lists these selectableFields jsonPaths.
func CRDFields(namespaced bool, jsonPaths []string) *FieldSet {
	var specs []*fieldSpec
	for _, p := range jsonPaths {
		segments, err := parseFieldPath(p)
		if err != nil {
			continue // the API server validated it; nothing to select on otherwise
		}
		specs = append(specs, &fieldSpec{name: strings.TrimPrefix(p, "."), value: pathValue("", segments...)})
	}
	return newFieldSet(namespaced, specs, nil)
}
