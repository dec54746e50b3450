package informerhub

import (
	"slices"
	"sort"
	"strings"

	"github.com/informerhub/informerhub/internal/jsonscan"
)

// FieldSet is the fields that field selectors of one resource type may
// name, with the meaning the API server gives them: for each field, how its
// value is read from an object's JSON. Every resource type has metadata.name,
// and namespaced ones metadata.namespace; built-in types add their own
// (builtinFieldSets), custom resources their CRD's selectableFields
// (CRDFieldSet). A FieldSet is immutable.
type FieldSet struct {
	specs map[string]*fieldSpec // by field name
	// aliases are names the API server also accepts, mapped to the name
	// the hub uses (pods' spec.host is spec.nodeName).
	aliases map[string]string
	names   []string // sorted
}

// fieldSpec is one field of a FieldSet.
type fieldSpec struct {
	name string
	// value reads the field's value from an object's JSON as the API
	// server formats it for field selectors. nil for metadata.name and
	// metadata.namespace, which every object carries decoded.
	value func(obj []byte) string
}

// newFieldSet returns the set of the metadata fields, the given fields and
// aliases.
func newFieldSet(namespaced bool, specs []*fieldSpec, aliases map[string]string) *FieldSet {
	s := &FieldSet{specs: map[string]*fieldSpec{"metadata.name": {name: "metadata.name"}}, aliases: aliases}
	if namespaced {
		s.specs["metadata.namespace"] = &fieldSpec{name: "metadata.namespace"}
	}
	for _, spec := range specs {
		s.specs[spec.name] = spec
	}
	for name := range s.specs {
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
	return s
}

// Names returns the fields of the set, sorted (aliases not included).
func (s *FieldSet) Names() []string { return slices.Clone(s.names) }

// canonical returns the name the hub uses for a field a selector names,
// and whether the resource type has it.
func (s *FieldSet) canonical(name string) (string, bool) {
	if alias, ok := s.aliases[name]; ok {
		name = alias
	}
	_, ok := s.specs[name]
	return name, ok
}

// spec returns the spec of a field of the set, by its canonical name.
func (s *FieldSet) spec(name string) *fieldSpec { return s.specs[name] }

func (s *FieldSet) describe() string { return strings.Join(s.names, ", ") }

// pathValue returns a fieldSpec's value function for a field that is the
// value at a path of the object, formatted as the API server formats it:
// strings as they are, numbers and booleans as their JSON text, and absent
// or null as def.
func pathValue(def string, path ...string) func([]byte) string {
	return func(obj []byte) string {
		if v, ok := jsonscan.ScalarString(jsonscan.Lookup(obj, path...)); ok {
			return v
		}
		return def
	}
}

// fieldValue is one cached field value of an object; see object.field.
type fieldValue struct {
	name, value string
}

// field returns the object's value of a field of its resource type's
// FieldSet. Values read from the JSON are cached on the object (which is
// immutable): each is read at most once per object, whoever asks.
func (o *object) field(spec *fieldSpec) string {
	switch spec.name {
	case "metadata.name":
		return o.name
	case "metadata.namespace":
		return o.namespace
	}
	cached := o.fields.Load()
	if cached != nil {
		for _, fv := range *cached {
			if fv.name == spec.name {
				return fv.value
			}
		}
	}
	v := spec.value(o.jsonBytes())
	for {
		var next []fieldValue
		if cached != nil {
			next = append(make([]fieldValue, 0, len(*cached)+1), *cached...)
		}
		next = append(next, fieldValue{name: spec.name, value: v})
		if o.fields.CompareAndSwap(cached, &next) {
			return v
		}
		// Another goroutine cached a field meanwhile: keep its too.
		cached = o.fields.Load()
		for _, fv := range *cached {
			if fv.name == spec.name {
				return fv.value
			}
		}
	}
}

// objectFields is an object as a fields.Fields, for the field selectors of
// a resource type whose FieldSet is set.
type objectFields struct {
	o   *object
	set *FieldSet
}

func (f objectFields) Has(name string) bool {
	_, ok := f.set.specs[name]
	return ok
}

func (f objectFields) Get(name string) string {
	spec := f.set.specs[name]
	if spec == nil {
		return ""
	}
	return f.o.field(spec)
}
