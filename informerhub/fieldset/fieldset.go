package fieldset

import (
	"slices"
	"sort"
	"strings"

	"github.com/informerhub/informerhub/informerhub/projection"
	"github.com/informerhub/informerhub/internal/jsonscan"
)

// Set is the fields that field selectors of one resource type may name,
// with the meaning the API server gives them: for each field, how its value
// is read from an object's JSON. Every resource type has metadata.name, and
// namespaced ones metadata.namespace; built-in types add their own
// (Builtin), custom resources their CRD's selectableFields (ForCRD). A Set
// is immutable.
type Set struct {
	specs map[string]*Spec // by field name
	// aliases are names the API server also accepts, mapped to the name
	// the hub uses (pods' spec.host is spec.nodeName).
	aliases map[string]string
	names   []string // sorted
}

// Spec is one field of a Set.
type Spec struct {
	name string
	// value reads the field's value from an object's JSON as the API
	// server formats it for field selectors.
	value func(obj []byte) string
}

// Name is the field's name, as a Set names it.
func (s *Spec) Name() string { return s.name }

// Value reads the field's value from an object's JSON, as the API server
// formats it for field selectors.
func (s *Spec) Value(obj []byte) string { return s.value(obj) }

// newSet returns the set of the metadata fields, the given fields and
// aliases.
func newSet(namespaced bool, specs []*Spec, aliases map[string]string) *Set {
	s := &Set{specs: map[string]*Spec{"metadata.name": {name: "metadata.name", value: pathValue("", "metadata", "name")}}, aliases: aliases}
	if namespaced {
		s.specs["metadata.namespace"] = &Spec{name: "metadata.namespace", value: pathValue("", "metadata", "namespace")}
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

// ForCRD returns the fields field selectors may name on a custom resource
// version whose CRD lists these selectableFields jsonPaths. A custom
// resource accepts metadata.name, metadata.namespace when it is namespaced,
// and the selectableFields of its version (named by their jsonPath without
// its leading dot); each value is the one at that path, a string, integer
// or boolean as its JSON text, "" when absent. (apiextensions-apiserver
// pkg/apiserver/conversion/converter.go and
// pkg/registry/customresource/strategy.go.)
func ForCRD(namespaced bool, jsonPaths []string) *Set {
	var specs []*Spec
	for _, p := range jsonPaths {
		segments, err := projection.ParsePath(p)
		if err != nil {
			continue // the API server validated it; nothing to select on otherwise
		}
		specs = append(specs, &Spec{name: strings.TrimPrefix(p, "."), value: pathValue("", segments...)})
	}
	return newSet(namespaced, specs, nil)
}

// Names returns the fields of the set, sorted (aliases not included).
func (s *Set) Names() []string { return slices.Clone(s.names) }

// Canonical returns the name the set uses for a field a selector names (an
// alias's field), and whether the resource type has it.
func (s *Set) Canonical(name string) (string, bool) {
	if alias, ok := s.aliases[name]; ok {
		name = alias
	}
	_, ok := s.specs[name]
	return name, ok
}

// Spec returns the spec of a field of the set, by its canonical name; nil
// for a field the set does not have.
func (s *Set) Spec(name string) *Spec { return s.specs[name] }

// Describe lists the fields of the set, for a person.
func (s *Set) Describe() string { return strings.Join(s.names, ", ") }

// pathValue returns a Spec's value function for a field that is the value
// at a path of the object, formatted as the API server formats it: strings
// as they are, numbers and booleans as their JSON text, and absent or null
// as def.
func pathValue(def string, path ...string) func([]byte) string {
	return func(obj []byte) string {
		if v, ok := jsonscan.ScalarString(jsonscan.Lookup(obj, path...)); ok {
			return v
		}
		return def
	}
}
