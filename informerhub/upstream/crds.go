package upstream

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub/fieldset"
)

// CRDFields keeps the selectable fields of every CustomResourceDefinition,
// from one informer on CRDs, so that field selectors on custom resources
// mean what the API server makes of them, and follow a CRD's changes: a
// field added to a version's selectableFields is accepted once the informer
// has seen the change. fieldset.ForCRD says what each field means.
type CRDFields struct {
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
	versions   map[string]crdVersion
}

// crdVersion is what the hub keeps of one version of a CRD.
type crdVersion struct {
	fields  *fieldset.Set
	columns []PrinterColumn
}

// PrinterColumn is one of a CRD version's additionalPrinterColumns: a
// column kubectl get shows for its objects, the value at JSONPath.
type PrinterColumn struct {
	Name        string
	Type        string // integer, number, string, boolean or date
	Format      string // OpenAPI format, e.g. int32, date-time; may be empty
	Description string
	// Priority 0 columns are shown by kubectl get; higher ones with -o wide.
	Priority int32
	JSONPath string // a simple JSONPath relative to the object, e.g. .spec.replicas
}

// MaxPrinterColumns and MaxPrinterColumnBytes bound what the hub keeps of
// a CRD version's additionalPrinterColumns, which every ListResources
// answer carries for every custom resource type: at most so many columns
// (the first), each string at most so many bytes (cut at a character).
// kubectl shows far fewer; a CRD's author does not grow every answer.
const (
	MaxPrinterColumns     = 64
	MaxPrinterColumnBytes = 1024
)

// truncateUTF8 cuts s to at most n bytes, at the start of a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// listerWatchers opens the lists and watches of informers, as Source
// does.
type listerWatchers interface {
	ListerWatcher(info ResourceInfo, namespace string) cache.ListerWatcher
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crdSummary is the part of a CRD that field selectors and printer
// columns need.
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
			AdditionalPrinterColumns []struct {
				Name        string `json:"name"`
				Type        string `json:"type"`
				Format      string `json:"format,omitempty"`
				Description string `json:"description,omitempty"`
				Priority    int32  `json:"priority,omitempty"`
				JSONPath    string `json:"jsonPath"`
			} `json:"additionalPrinterColumns,omitempty"`
		} `json:"versions"`
	} `json:"spec"`
}

// NewCRDFields returns the CRDFields of the cluster that lw lists and
// watches. Start it before use, and Stop it.
func NewCRDFields(lw listerWatchers, log *slog.Logger) *CRDFields {
	c := &CRDFields{
		log:    log.With("resource", FormatResource(crdResource)),
		done:   make(chan struct{}),
		synced: make(chan struct{}),
		byName: map[string]crdVersions{},
	}
	c.informer = cache.NewSharedIndexInformer(lw.ListerWatcher(ResourceInfo{Resource: crdResource}, ""), &Object{}, 0, cache.Indexers{})
	// A CRD's schema can be large; only what crdSummary holds is kept.
	_ = c.informer.SetTransform(func(obj any) (any, error) {
		raw, ok := obj.(*Object)
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
		out := &Object{JSON: compact}
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

func (c *CRDFields) closeSyncedLocked() {
	if !c.syncedClosed {
		c.syncedClosed = true
		close(c.synced)
	}
}

// Start runs the informer until Stop.
func (c *CRDFields) Start() {
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

// Stop stops the informer, and waits for it.
func (c *CRDFields) Stop() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
}

func (c *CRDFields) put(obj any) {
	raw, ok := obj.(*Object)
	if !ok {
		return
	}
	var summary crdSummary
	if err := json.Unmarshal(raw.JSON, &summary); err != nil {
		c.log.Warn("cannot read a CustomResourceDefinition", "name", raw.Name, "error", err)
		return
	}
	entry := crdVersions{namespaced: summary.Spec.Scope == "Namespaced", versions: map[string]crdVersion{}}
	for _, v := range summary.Spec.Versions {
		var paths []string
		for _, f := range v.SelectableFields {
			paths = append(paths, f.JSONPath)
		}
		var columns []PrinterColumn
		for _, c := range v.AdditionalPrinterColumns {
			if len(columns) == MaxPrinterColumns {
				break
			}
			col := PrinterColumn(c)
			for _, s := range []*string{&col.Name, &col.Type, &col.Format, &col.Description, &col.JSONPath} {
				*s = truncateUTF8(*s, MaxPrinterColumnBytes)
			}
			columns = append(columns, col)
		}
		entry.versions[v.Name] = crdVersion{fields: fieldset.ForCRD(entry.namespaced, paths), columns: columns}
	}
	c.mu.Lock()
	c.byName[summary.Metadata.Name] = entry
	c.mu.Unlock()
}

func (c *CRDFields) delete(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if raw, ok := obj.(*Object); ok {
		c.mu.Lock()
		delete(c.byName, raw.Name)
		c.mu.Unlock()
	}
}

// fields returns the fields of a custom resource, or false when no CRD
// defines gvr. It waits until the informer has listed the CRDs.
func (c *CRDFields) fields(ctx context.Context, gvr schema.GroupVersionResource) (*fieldset.Set, bool, error) {
	v, ok, err := c.version(ctx, gvr)
	return v.fields, ok, err
}

// version returns what the hub keeps of a custom resource's version: its
// fields, and its printer columns (none for a version the CRD does not
// list); false when no CRD defines gvr. It waits until the informer has
// listed the CRDs. The columns are shared: callers must not modify them.
func (c *CRDFields) version(ctx context.Context, gvr schema.GroupVersionResource) (crdVersion, bool, error) {
	if gvr.Group == "" {
		return crdVersion{}, false, nil // the core group has no custom resources
	}
	select {
	case <-c.synced:
	case <-ctx.Done():
		return crdVersion{}, false, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	entry, ok := c.byName[gvr.Resource+"."+gvr.Group]
	if !ok {
		return crdVersion{}, false, nil
	}
	v, ok := entry.versions[gvr.Version]
	if !ok {
		v = crdVersion{fields: fieldset.ForCRD(entry.namespaced, nil)}
	}
	return v, true, nil
}
