package state

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub/celfilter"
	"github.com/informerhub/informerhub/informerhub/digest"
	"github.com/informerhub/informerhub/informerhub/fieldset"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// Object is the hub's cached form of one Kubernetes object: its JSON, ready to
// send, and the few metadata fields the hub orders, filters and resumes by.
// Objects are immutable once built and shared by the state, the history and
// every subscriber.
type Object struct {
	Namespace string
	Name      string
	UID       string
	RV        uint64
	Labels    labels.Set
	JSON      string

	// hash is the object's digest.Hash, computed when it is built from
	// the informer's object (NewObject), outside any lock: the feed keeps
	// the digests of its state up with every change (see Hash).
	hash   digest.Hash
	hashed bool

	// What selectors computed of the object, cached because the object
	// never changes: the field values read from its JSON (see field), and
	// the results of filters (see filter.matches).
	fields   atomic.Pointer[[]fieldValue]
	verdicts atomic.Pointer[[]cachedVerdict]
}

// objectOverhead approximates what an object costs besides its JSON and
// labels: the struct, with its strings' headers, a full cache of filter
// results, and an allowance for the few field values selectors cache. The
// reasons of filters that failed on the object are not counted: the
// objects on which a filter fails the same way share one
// (celfilter.Filter.Failed), and over cost all share one; a reason that
// quotes the object (a key read from its data) is its own, at most
// maxFilterErrorLength (and "...") for each of the 16 results cached.
const objectOverhead = int(unsafe.Sizeof(Object{})) +
	MaxCachedVerdicts*int(unsafe.Sizeof(cachedVerdict{})) + 2*int(unsafe.Sizeof([]cachedVerdict{})) +
	fieldValuesAllowance

// fieldValuesAllowance is what objectOverhead allows for the field values
// an object caches (Object.Field): a few short strings, as a resource
// type's field selectors read names, phases and the like.
const fieldValuesAllowance = 128

// ObjectSize approximates the bytes an object holds.
func ObjectSize(o *Object) int64 {
	n := len(o.JSON) + len(o.Namespace) + len(o.Name) + len(o.UID) + objectOverhead
	for k, v := range o.Labels {
		n += len(k) + len(v) + 32 // and the map's slot
	}
	return int64(n)
}

// JSONBytes returns the object's JSON as bytes without copying it. The
// bytes must never be written to: they are the string's.
func (o *Object) JSONBytes() []byte { return UnsafeBytes(o.JSON) }

// UnsafeBytes returns the bytes of s without copying them, for functions
// that only read them (internal/jsonscan, package projection). They must
// never be written to.
func UnsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// ObjectLess orders objects by namespace, then name: the order of initial
// events and snapshot pages.
func ObjectLess(a, b *Object) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

// NewObject converts what the informer delivers into an object. The kube
// source delivers *upstream.Object, whose JSON is kept byte for byte; any other
// runtime.Object (tests use typed objects) is encoded with encoding/json.
func NewObject(obj any) (*Object, error) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if raw, ok := obj.(*upstream.Object); ok {
		rv, err := ParseResourceVersion(raw.ResourceVersion)
		if err != nil {
			return nil, fmt.Errorf("object %s/%s: %w", raw.Namespace, raw.Name, err)
		}
		return (&Object{
			Namespace: raw.Namespace,
			Name:      raw.Name,
			UID:       string(raw.UID),
			RV:        rv,
			Labels:    raw.Labels,
			// The object shares the upstream.Object's bytes, which nothing
			// writes once decoded (see upstream.Object): a copy would cost
			// each change its object's size again, and a sync its whole
			// list's.
			JSON: unsafe.String(unsafe.SliceData(raw.JSON), len(raw.JSON)),
		}).withHash(), nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("informer delivered %T: %w", obj, err)
	}
	rv, err := ParseResourceVersion(m.GetResourceVersion())
	if err != nil {
		return nil, fmt.Errorf("object %s/%s: %w", m.GetNamespace(), m.GetName(), err)
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding object %s/%s: %w", m.GetNamespace(), m.GetName(), err)
	}
	return (&Object{
		Namespace: m.GetNamespace(),
		Name:      m.GetName(),
		UID:       string(m.GetUID()),
		RV:        rv,
		Labels:    m.GetLabels(),
		JSON:      string(data),
	}).withHash(), nil
}

// Hash is the object's digest.Hash: the one NewObject computed, or, for an
// object built otherwise (read back from disk), computed now.
func (o *Object) Hash() digest.Hash {
	if o.hashed {
		return o.hash
	}
	return digest.OfRV(o.Namespace, o.Name, o.UID, o.RV)
}

// withHash computes the object's hash once, before it is shared.
func (o *Object) withHash() *Object {
	o.hash, o.hashed = digest.OfRV(o.Namespace, o.Name, o.UID, o.RV), true
	return o
}

// ParseResourceVersion reads a resourceVersion as the integer etcd makes of
// it. Kubernetes calls resourceVersions opaque, but every API server backed by
// etcd serves integers, and ordering them is what makes resume exact (the same
// assumption as k8s.io/apimachinery/pkg/util/resourceversion).
func ParseResourceVersion(rv string) (uint64, error) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("resourceVersion %q is not an integer", rv)
	}
	return n, nil
}

// filterResult is a filter's result on an object, cached on the object.
type cachedVerdict struct {
	id uint64
	Verdict
}

// MaxCachedVerdicts bounds the filter results an object keeps; the
// oldest go first. It is below Config.MaxFiltersPerResource's default, as
// objectOverhead counts a full cache in every object: a result that fell
// out costs one evaluation again, bounded by Config.MaxFilterCost.
const MaxCachedVerdicts = 16

// CachedVerdict returns the result of the filter with that ID on the
// object, if the object has it cached.
func (o *Object) CachedVerdict(id uint64) (Verdict, bool) {
	if cached := o.verdicts.Load(); cached != nil {
		for _, r := range *cached {
			if r.id == id {
				return r.Verdict, true
			}
		}
	}
	return Verdict{}, false
}

// CacheVerdict caches the result of the filter with that ID on the
// object, dropping the oldest past maxCachedFilterResults.
func (o *Object) CacheVerdict(id uint64, v Verdict) {
	cached := o.verdicts.Load()
	for {
		n := 0
		if cached != nil {
			n = min(len(*cached), MaxCachedVerdicts-1)
		}
		next := make([]cachedVerdict, 0, n+1)
		if cached != nil {
			next = append(next, (*cached)[len(*cached)-n:]...)
		}
		next = append(next, cachedVerdict{id: id, Verdict: v})
		if o.verdicts.CompareAndSwap(cached, &next) {
			return
		}
		cached = o.verdicts.Load()
	}
}

// fieldValue is one cached field value of an object; see Object.Field.
type fieldValue struct {
	name, value string
}

// Field returns the object's value of a field of its resource type's
// field set. Values read from the JSON are cached on the object (which is
// immutable): each is read at most once per object, whoever asks.
func (o *Object) Field(spec *fieldset.Spec) string {
	switch spec.Name() {
	case "metadata.name":
		return o.Name
	case "metadata.namespace":
		return o.Namespace
	}
	cached := o.fields.Load()
	if cached != nil {
		for _, fv := range *cached {
			if fv.name == spec.Name() {
				return fv.value
			}
		}
	}
	v := spec.Value(o.JSONBytes())
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

// Verdict is what a filter decided on an object: whether it selects it,
// and, when it could not decide, why.
type Verdict struct {
	Match bool
	// Undecided, when set, is why the filter could not decide: its
	// evaluation failed, or ran over its cost limit. The object is then
	// selected (Match is true), and its events say why (Event.FilterError):
	// a filter is no boundary, since whoever may watch the resource type
	// may read the object anyway, so one that cannot decide drops nothing,
	// and ends no stream, whoever wrote the object.
	Undecided *celfilter.Failure
}

// Key names an object of a resource type.
type Key struct{ Namespace, Name string }
