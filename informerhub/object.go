package informerhub

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub/fieldset"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// object is the hub's cached form of one Kubernetes object: its JSON, ready to
// send, and the few metadata fields the hub orders, filters and resumes by.
// Objects are immutable once built and shared by the state, the history and
// every subscriber.
type object struct {
	namespace string
	name      string
	uid       string
	rv        uint64
	labels    labels.Set
	json      string

	// What selectors computed of the object, cached because the object
	// never changes: the field values read from its JSON (see field), and
	// the results of filters (see filter.matches).
	fields  atomic.Pointer[[]fieldValue]
	filters atomic.Pointer[[]filterResult]
}

// objectOverhead approximates what an object costs besides its JSON and
// labels: the struct, with its strings' headers, a full cache of filter
// results, and an allowance for the few field values selectors cache. The
// reasons of filters that failed on the object are not counted: the
// objects on which a filter fails the same way share one
// (celfilter.Filter.Failed), and over cost all share one; a reason that
// quotes the object (a key read from its data) is its own, at most
// maxFilterErrorLength (and "...") for each of the 16 results cached.
const objectOverhead = int(unsafe.Sizeof(object{})) +
	maxCachedFilterResults*int(unsafe.Sizeof(filterResult{})) + 2*int(unsafe.Sizeof([]filterResult{})) +
	fieldValuesAllowance

// fieldValuesAllowance is what objectOverhead allows for the field values
// an object caches (object.field): a few short strings, as a resource
// type's field selectors read names, phases and the like.
const fieldValuesAllowance = 128

// objectSize approximates the bytes an object holds.
func objectSize(o *object) int64 {
	n := len(o.json) + len(o.namespace) + len(o.name) + len(o.uid) + objectOverhead
	for k, v := range o.labels {
		n += len(k) + len(v) + 32 // and the map's slot
	}
	return int64(n)
}

// jsonBytes returns the object's JSON as bytes without copying it. The
// bytes must never be written to: they are the string's.
func (o *object) jsonBytes() []byte { return unsafeBytes(o.json) }

// unsafeBytes returns the bytes of s without copying them, for functions
// that only read them (internal/jsonscan, package projection). They must
// never be written to.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// objectLess orders objects by namespace, then name: the order of initial
// events and snapshot pages.
func objectLess(a, b *object) bool {
	if a.namespace != b.namespace {
		return a.namespace < b.namespace
	}
	return a.name < b.name
}

// newObject converts what the informer delivers into an object. The kube
// source delivers *upstream.Object, whose JSON is kept byte for byte; any other
// runtime.Object (tests use typed objects) is encoded with encoding/json.
func newObject(obj any) (*object, error) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if raw, ok := obj.(*upstream.Object); ok {
		rv, err := parseResourceVersion(raw.ResourceVersion)
		if err != nil {
			return nil, fmt.Errorf("object %s/%s: %w", raw.Namespace, raw.Name, err)
		}
		return &object{
			namespace: raw.Namespace,
			name:      raw.Name,
			uid:       string(raw.UID),
			rv:        rv,
			labels:    raw.Labels,
			// The object shares the upstream.Object's bytes, which nothing
			// writes once decoded (see upstream.Object): a copy would cost
			// each change its object's size again, and a sync its whole
			// list's.
			json: unsafe.String(unsafe.SliceData(raw.JSON), len(raw.JSON)),
		}, nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("informer delivered %T: %w", obj, err)
	}
	rv, err := parseResourceVersion(m.GetResourceVersion())
	if err != nil {
		return nil, fmt.Errorf("object %s/%s: %w", m.GetNamespace(), m.GetName(), err)
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding object %s/%s: %w", m.GetNamespace(), m.GetName(), err)
	}
	return &object{
		namespace: m.GetNamespace(),
		name:      m.GetName(),
		uid:       string(m.GetUID()),
		rv:        rv,
		labels:    m.GetLabels(),
		json:      string(data),
	}, nil
}

// parseResourceVersion reads a resourceVersion as the integer etcd makes of
// it. Kubernetes calls resourceVersions opaque, but every API server backed by
// etcd serves integers, and ordering them is what makes resume exact (the same
// assumption as k8s.io/apimachinery/pkg/util/resourceversion).
func parseResourceVersion(rv string) (uint64, error) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("resourceVersion %q is not an integer", rv)
	}
	return n, nil
}

// filterResult is a filter's result on an object, cached on the object.
type filterResult struct {
	id uint64
	verdict
}

// maxCachedFilterResults bounds the filter results an object keeps; the
// oldest go first. It is below Config.MaxFiltersPerResource's default, as
// objectOverhead counts a full cache in every object: a result that fell
// out costs one evaluation again, bounded by Config.MaxFilterCost.
const maxCachedFilterResults = 16

// filterResult returns the result of the filter with that ID on the
// object, if the object has it cached.
func (o *object) filterResult(id uint64) (verdict, bool) {
	if cached := o.filters.Load(); cached != nil {
		for _, r := range *cached {
			if r.id == id {
				return r.verdict, true
			}
		}
	}
	return verdict{}, false
}

// cacheFilterResult caches the result of the filter with that ID on the
// object, dropping the oldest past maxCachedFilterResults.
func (o *object) cacheFilterResult(id uint64, v verdict) {
	cached := o.filters.Load()
	for {
		n := 0
		if cached != nil {
			n = min(len(*cached), maxCachedFilterResults-1)
		}
		next := make([]filterResult, 0, n+1)
		if cached != nil {
			next = append(next, (*cached)[len(*cached)-n:]...)
		}
		next = append(next, filterResult{id: id, verdict: v})
		if o.filters.CompareAndSwap(cached, &next) {
			return
		}
		cached = o.filters.Load()
	}
}

// fieldValue is one cached field value of an object; see object.field.
type fieldValue struct {
	name, value string
}

// field returns the object's value of a field of its resource type's
// field set. Values read from the JSON are cached on the object (which is
// immutable): each is read at most once per object, whoever asks.
func (o *object) field(spec *fieldset.Spec) string {
	switch spec.Name() {
	case "metadata.name":
		return o.name
	case "metadata.namespace":
		return o.namespace
	}
	cached := o.fields.Load()
	if cached != nil {
		for _, fv := range *cached {
			if fv.name == spec.Name() {
				return fv.value
			}
		}
	}
	v := spec.Value(o.jsonBytes())
	for {
		var next []fieldValue
		if cached != nil {
			next = append(make([]fieldValue, 0, len(*cached)+1), *cached...)
		}
		next = append(next, fieldValue{name: spec.Name(), value: v})
		if o.fields.CompareAndSwap(cached, &next) {
			return v
		}
		// Another goroutine cached a field meanwhile: keep its too.
		cached = o.fields.Load()
		for _, fv := range *cached {
			if fv.name == spec.Name() {
				return fv.value
			}
		}
	}
}

// objectFields is an object as a fields.Fields, for the field selectors of
// its resource type's field set.
type objectFields struct {
	o   *object
	set *fieldset.Set
}

func (f objectFields) Has(name string) bool { return f.set.Spec(name) != nil }

func (f objectFields) Get(name string) string {
	spec := f.set.Spec(name)
	if spec == nil {
		return ""
	}
	return f.o.field(spec)
}
