package selection

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sselection "k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/informerhub/informerhub/informerhub/celfilter"
	"github.com/informerhub/informerhub/informerhub/fieldset"
	"github.com/informerhub/informerhub/informerhub/internal/errs"
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/shard"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// Spec chooses objects of one resource type, with the meaning Kubernetes
// gives a LIST or WATCH request, and a filter besides (informerhub.Selector).
type Spec struct {
	Resource schema.GroupVersionResource
	// Namespace restricts to one namespace; "" means all namespaces.
	Namespace string
	// LabelSelector in Kubernetes syntax; "" selects everything.
	LabelSelector string
	// FieldSelector in Kubernetes syntax, on the fields the API server
	// supports for the resource type (upstream.ResourceInfo.Fields); "" selects
	// everything.
	FieldSelector string
	// Filter is a CEL expression over `object`, the object as JSON values;
	// the objects it evaluates to true for are selected (see package
	// celfilter).
	// "" selects everything.
	Filter string
	// ShardSelector in Kubernetes syntax (KEP-5866): hash ranges of
	// object.metadata.uid or object.metadata.namespace (see package
	// shard); "" selects everything.
	ShardSelector string
}

// Limits bound what a selector, and the selectors of a resource type
// together, may ask for (the Config fields of the same names).
type Limits struct {
	MaxSelectorLength, MaxFilterLength, MaxSelectorTerms int
	MaxFiltersPerResource, MaxProjectionsPerResource     int
	MaxFiltersPerOwner, MaxProjectionsPerOwner           int
}

// Selector is a parsed Selector.
type Selector struct {
	namespace string
	labels    labels.Selector   // nil selects everything
	fields    fields.Selector   // nil selects everything; fields by their canonical names
	fieldSet  *fieldset.Set     // the resource type's fields, as of parsing
	filter    *celfilter.Filter // nil selects everything
	shard     *shard.Selector   // nil selects everything
	// filterErrors counts the filter's evaluations that fail, for the
	// resource type's statistics; nil counts nothing.
	filterErrors *atomic.Uint64
	// key identifies what the selector selects: selectors with equal keys
	// select the same objects and share their matching (the core's dispatcher).
	key string
	// fingerprint identifies the selection in tokens of initial events
	// (fingerprintOf); legacyFingerprint is what older hubs put there.
	fingerprint, legacyFingerprint uint64
}

// A Selector is immutable once parsed; these read it.

// Namespace is the namespace it selects in; "" selects in all.
func (s *Selector) Namespace() string { return s.namespace }

// Labels is its label selector; nil selects every object.
func (s *Selector) Labels() labels.Selector { return s.labels }

// Fields is its field selector, by the fields' canonical names; nil
// selects every object.
func (s *Selector) Fields() fields.Selector { return s.fields }

// FieldSet is the resource type's field set, as of parsing.
func (s *Selector) FieldSet() *fieldset.Set { return s.fieldSet }

// Filter is its filter; nil selects every object.
func (s *Selector) Filter() *celfilter.Filter { return s.filter }

// Shard is its shard selector; nil selects every object.
func (s *Selector) Shard() *shard.Selector { return s.shard }

// SelectsWholeNamespaces reports whether it selects every object of its
// namespace (of every namespace, without one): no labels, fields, filter
// or shard narrow it.
func (s *Selector) SelectsWholeNamespaces() bool {
	return s.labels == nil && s.fields == nil && s.filter == nil && s.shard == nil
}

// Key identifies what it selects: selectors with equal keys select the
// same objects, and share their matching.
func (s *Selector) Key() string { return s.key }

// Fingerprint identifies the selection in tokens of initial events;
// LegacyFingerprint is what older hubs put there.
func (s *Selector) Fingerprint() uint64       { return s.fingerprint }
func (s *Selector) LegacyFingerprint() uint64 { return s.legacyFingerprint }

// ValidateResource checks the parts of a Selector that must be present
// before the resource can be looked up.
func ValidateResource(s Spec) error {
	if s.Resource.Version == "" {
		return &errs.RequestError{Field: errs.FieldVersion, Err: errs.ErrInvalidRequest, Reason: `version is required, e.g. "v1"`}
	}
	if s.Resource.Resource == "" {
		return &errs.RequestError{Field: errs.FieldResource, Err: errs.ErrInvalidRequest, Reason: `resource is required: the plural name, e.g. "configmaps"`}
	}
	// These go into discovery and REST paths: they must be names, never
	// anything a path could make more of.
	if g := s.Resource.Group; g != "" {
		if problems := validation.IsDNS1123Subdomain(g); len(problems) > 0 {
			return &errs.RequestError{Field: errs.FieldGroup, Err: errs.ErrInvalidRequest,
				Reason: fmt.Sprintf("%q is not a valid API group: %s", Truncate(g), strings.Join(problems, "; "))}
		}
	}
	if problems := validation.IsDNS1035Label(s.Resource.Version); len(problems) > 0 {
		return &errs.RequestError{Field: errs.FieldVersion, Err: errs.ErrInvalidRequest,
			Reason: fmt.Sprintf("%q is not a valid API version: %s", Truncate(s.Resource.Version), strings.Join(problems, "; "))}
	}
	resource, subresource, isSub := strings.Cut(s.Resource.Resource, "/")
	for _, part := range []string{resource, subresource} {
		if part == "" && !isSub {
			continue
		}
		if problems := validation.IsDNS1123Label(part); len(problems) > 0 {
			return &errs.RequestError{Field: errs.FieldResource, Err: errs.ErrInvalidRequest,
				Reason: fmt.Sprintf("%q is not a valid resource name: %s", Truncate(s.Resource.Resource), strings.Join(problems, "; "))}
		}
	}
	return nil
}

// CheckSyntax checks the namespace's name and the lengths of s's selectors
// and filter.
func CheckSyntax(s Spec, cfg *Limits) error {
	if s.Namespace != "" {
		if problems := validation.IsDNS1123Label(s.Namespace); len(problems) > 0 {
			return &errs.RequestError{Field: errs.FieldNamespace, Err: errs.ErrInvalidRequest,
				Reason: fmt.Sprintf("%q is not a valid namespace: %s", Truncate(s.Namespace), strings.Join(problems, "; "))}
		}
	}
	if len(s.LabelSelector) > cfg.MaxSelectorLength {
		return &errs.RequestError{Field: errs.FieldLabelSelector, Err: errs.ErrInvalidRequest,
			Reason: fmt.Sprintf("label selector is longer than %d bytes", cfg.MaxSelectorLength)}
	}
	if len(s.FieldSelector) > cfg.MaxSelectorLength {
		return &errs.RequestError{Field: errs.FieldFieldSelector, Err: errs.ErrInvalidRequest,
			Reason: fmt.Sprintf("field selector is longer than %d bytes", cfg.MaxSelectorLength)}
	}
	if len(s.ShardSelector) > cfg.MaxSelectorLength {
		return &errs.RequestError{Field: errs.FieldShardSelector, Err: errs.ErrInvalidRequest,
			Reason: fmt.Sprintf("shard selector is longer than %d bytes", cfg.MaxSelectorLength)}
	}
	if len(s.Filter) > cfg.MaxFilterLength {
		return &errs.RequestError{Field: errs.FieldFilter, Err: errs.ErrInvalidRequest,
			Reason: fmt.Sprintf("filter is %d bytes long; at most %d are allowed", len(s.Filter), cfg.MaxFilterLength)}
	}
	return nil
}

// Parse validates a Selector for a resolved resource type, within
// the limits of cfg, so no request can make the hub parse or match without
// bound. filters compiles the selector's filter, if it has one.
func Parse(s Spec, info upstream.ResourceInfo, cfg *Limits, filters *celfilter.Compiler) (*Selector, error) {
	if err := CheckSyntax(s, cfg); err != nil {
		return nil, err
	}
	maxSelectorTerms := cfg.MaxSelectorTerms
	sel := &Selector{namespace: s.Namespace, fieldSet: info.FieldSet()}
	if s.Namespace != "" && !info.Namespaced {
		return nil, &errs.RequestError{Field: errs.FieldNamespace, Err: errs.ErrInvalidRequest,
			Reason: fmt.Sprintf("%s is cluster-scoped: namespace must be empty", upstream.FormatResource(info.Resource))}
	}
	if s.LabelSelector != "" {
		parsed, err := labels.Parse(s.LabelSelector)
		if err != nil {
			return nil, &errs.RequestError{Field: errs.FieldLabelSelector, Err: errs.ErrInvalidRequest, Reason: err.Error()}
		}
		requirements, _ := parsed.Requirements()
		if len(requirements) > maxSelectorTerms {
			return nil, &errs.RequestError{Field: errs.FieldLabelSelector, Err: errs.ErrInvalidRequest,
				Reason: fmt.Sprintf("label selector has %d terms; at most %d are allowed", len(requirements), maxSelectorTerms)}
		}
		if !parsed.Empty() {
			sel.labels = parsed
		}
	}
	if s.FieldSelector != "" {
		parsed, err := ParseFieldSelector(s.FieldSelector, info, sel.fieldSet, cfg)
		if err != nil {
			return nil, err
		}
		if !parsed.Empty() {
			sel.fields = parsed
		}
	}
	if s.ShardSelector != "" {
		parsed, err := shard.Parse(s.ShardSelector)
		if err != nil {
			return nil, &errs.RequestError{Field: errs.FieldShardSelector, Err: errs.ErrInvalidRequest,
				Reason: strings.TrimPrefix(err.Error(), shard.ErrInvalid.Error()+": ")}
		}
		if n := len(parsed.Ranges()); n > maxSelectorTerms {
			return nil, &errs.RequestError{Field: errs.FieldShardSelector, Err: errs.ErrInvalidRequest,
				Reason: fmt.Sprintf("shard selector has %d ranges; at most %d are allowed", n, maxSelectorTerms)}
		}
		sel.shard = parsed
	}
	if s.Filter != "" {
		f, err := filters.Compile(s.Filter)
		if err != nil {
			var exprErr *celfilter.Error
			if errors.As(err, &exprErr) {
				return nil, &errs.RequestError{Field: errs.FieldFilter, Err: errs.ErrInvalidRequest, Reason: exprErr.Reason}
			}
			return nil, err
		}
		sel.filter = f
	}
	sel.key = selectorKey(sel)
	sel.fingerprint = fingerprintOf(sel.key)
	sel.legacyFingerprint = legacyFingerprint(sel)
	return sel, nil
}

// fingerprintOf is the fingerprint of a selector whose key is key: equal
// for selectors that select the same, however written ("x=1" and
// "x in (1)"), as the proto promises of tokens of initial events.
func fingerprintOf(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("key:"))
	h.Write([]byte(key))
	return h.Sum64()
}

// legacyFingerprint is what hubs before fingerprintOf put in tokens of
// initial events: a hash of the selectors as written. Tokens they issued
// are still accepted (checkToken), with the selector as it was written.
func legacyFingerprint(sel *Selector) uint64 {
	h := fnv.New64a()
	parts := []string{sel.namespace, Canonical(sel.labels), Canonical(sel.fields)}
	if sel.filter != nil {
		parts = append(parts, sel.filter.Expr())
	}
	if sel.shard != nil {
		parts = append(parts, "shard:"+sel.shard.String())
	}
	for _, part := range parts {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// ParseFieldSelector validates a field selector against the fields of a
// resource type, and returns it with every field by its canonical name.
func ParseFieldSelector(s string, info upstream.ResourceInfo, set *fieldset.Set, cfg *Limits) (fields.Selector, error) {
	parsed, err := fields.ParseSelector(s)
	if err != nil {
		return nil, &errs.RequestError{Field: errs.FieldFieldSelector, Err: errs.ErrInvalidRequest, Reason: err.Error()}
	}
	if n := len(parsed.Requirements()); n > cfg.MaxSelectorTerms {
		return nil, &errs.RequestError{Field: errs.FieldFieldSelector, Err: errs.ErrInvalidRequest,
			Reason: fmt.Sprintf("field selector has %d terms; at most %d are allowed", n, cfg.MaxSelectorTerms)}
	}
	return parsed.Transform(func(field, value string) (string, string, error) {
		name, ok := set.Canonical(field)
		switch {
		case !ok && field == "metadata.namespace" && !info.Namespaced:
			// The API server refuses it too, and the hub replays with
			// the same selector.
			return "", "", &errs.RequestError{Field: errs.FieldFieldSelector, Err: errs.ErrInvalidRequest,
				Reason: fmt.Sprintf("%s is cluster-scoped: its objects have no metadata.namespace; select on metadata.name", upstream.FormatResource(info.Resource))}
		case !ok:
			return "", "", &errs.RequestError{Field: errs.FieldFieldSelector, Err: errs.ErrInvalidRequest,
				Reason: fmt.Sprintf("field %q is not supported for %s; supported fields: %s", Truncate(field), upstream.FormatResource(info.Resource), set.Describe())}
		}
		return name, value, nil
	})
}

// selectorKey is what identifies a selector's selection: its namespace, its
// label and field requirements in a canonical order, and its filter.
func selectorKey(sel *Selector) string {
	var fieldTerms []string
	if sel.fields != nil {
		for _, r := range sel.fields.Requirements() {
			op := r.Operator
			if op == k8sselection.DoubleEquals {
				op = k8sselection.Equals
			}
			fieldTerms = append(fieldTerms, r.Field+string(op)+fields.EscapeValue(r.Value))
		}
		sort.Strings(fieldTerms)
	}
	var labelTerms []string
	if sel.labels != nil {
		reqs, _ := sel.labels.Requirements()
		for _, r := range reqs {
			// k in (v) is k=v, k notin (v) is k!=v.
			op, values := r.Operator(), r.ValuesUnsorted()
			switch {
			case (op == k8sselection.In || op == k8sselection.DoubleEquals) && len(values) == 1:
				op = k8sselection.Equals
			case op == k8sselection.NotIn && len(values) == 1:
				op = k8sselection.NotEquals
			}
			if canon, err := labels.NewRequirement(r.Key(), op, values); err == nil {
				labelTerms = append(labelTerms, canon.String())
			} else {
				labelTerms = append(labelTerms, r.String())
			}
		}
		sort.Strings(labelTerms)
	}
	filter, shardRanges := "", ""
	if sel.filter != nil {
		filter = sel.filter.Expr()
	}
	if sel.shard != nil {
		shardRanges = sel.shard.String()
	}
	// Each part is length-prefixed: field values and filters may hold any
	// byte, and two selectors must never share a key by accident.
	var b strings.Builder
	for _, part := range []string{sel.namespace, strings.Join(labelTerms, ","), strings.Join(fieldTerms, ","), filter, shardRanges} {
		b.WriteString(strconv.Itoa(len(part)))
		b.WriteByte(':')
		b.WriteString(part)
	}
	return b.String()
}

// UpstreamQuery is how a replay (package internal/stream) asks the API server for a
// selector's selection, and what the hub must evaluate itself on what the
// API server sends back. Every other path evaluates the whole selector in
// the hub (matches); this is the one place that says which parts the API
// server evaluates, and the replay asks nothing else of it:
//
//   - the namespace, as the REST path (/namespaces/N/...), which serves
//     every namespaced type, whatever field selectors it takes
//     (podcertificaterequests refuse metadata.namespace as a field);
//   - the label selector, which the API server evaluates as the hub does;
//   - the field selector, unless the API server refused it
//     (withFields false): the hub's table of fields (package fieldset)
//     can name one this API server does not serve (an older version, a
//     custom resource's selectableFields not loaded yet or behind a gate);
//   - never the shard selector, which an API server evaluates only with
//     the alpha gate ShardedListAndWatch on and ignores otherwise, nor the
//     filter (CEL), which it has no notion of.
type UpstreamQuery struct {
	Namespace     string
	LabelSelector string
	FieldSelector string
	// Local selects by the parts the API server does not evaluate, and
	// the namespace (a Source that serves other namespaces' objects on a
	// namespace's path sends nothing of them on); nil when there is
	// nothing to evaluate.
	Local *Selector
	// Stateful is set when local's verdict on an object can change as the
	// object changes (a filter, a field other than metadata.name and
	// metadata.namespace): then the upstream watch's MODIFIED may be an
	// object entering or leaving the selection, which only the object's
	// previous verdict tells, and a replay must keep state (see replay).
	// The uid and namespace a shard hashes never change.
	Stateful bool
}

// UpstreamQuery splits the selector between the API server and the hub;
// withFields says whether the API server evaluates its field selector.
func (s *Selector) UpstreamQuery(withFields bool) UpstreamQuery {
	q := UpstreamQuery{Namespace: s.namespace}
	if s.labels != nil {
		q.LabelSelector = s.labels.String()
	}
	local := &Selector{namespace: s.namespace, fieldSet: s.fieldSet, shard: s.shard, filter: s.filter, filterErrors: s.filterErrors}
	switch {
	case s.fields == nil:
	case withFields:
		q.FieldSelector = s.fields.String()
	default:
		local.fields = s.fields
		for _, r := range s.fields.Requirements() {
			if r.Field != "metadata.name" && r.Field != "metadata.namespace" {
				q.Stateful = true
			}
		}
	}
	if local.filter != nil {
		q.Stateful = true
	}
	if local.namespace != "" || local.fields != nil || local.shard != nil || local.filter != nil {
		q.Local = local
	}
	return q
}

// Trigger returns the equality the dispatcher indexes the selector by:
// one that every object it selects satisfies, the most selective there is
// (a name, another field, a label, a namespace), or false when it has none.
func (s *Selector) Trigger() (Trigger, bool) {
	var field, namespace *Trigger
	if s.namespace != "" {
		namespace = &Trigger{Kind: TriggerNamespace, Value: s.namespace}
	}
	if s.fields != nil {
		for _, r := range s.fields.Requirements() {
			if r.Operator != k8sselection.Equals && r.Operator != k8sselection.DoubleEquals {
				continue
			}
			switch r.Field {
			case "metadata.name":
				return Trigger{Kind: TriggerName, Value: r.Value}, true
			case "metadata.namespace":
				if namespace == nil {
					namespace = &Trigger{Kind: TriggerNamespace, Value: r.Value}
				}
			default:
				if field == nil {
					field = &Trigger{Kind: TriggerField, Key: r.Field, Value: r.Value}
				}
			}
		}
	}
	if field != nil {
		return *field, true
	}
	if pairs := Equalities(s.labels); len(pairs) > 0 {
		return Trigger{Kind: TriggerLabel, Key: pairs[0].Key, Value: pairs[0].Value}, true
	}
	if namespace != nil {
		return *namespace, true
	}
	return Trigger{}, false
}

func Canonical(s fmt.Stringer) string {
	if s == nil {
		return ""
	}
	return s.String()
}

// Matches returns whether an object is selected, and why the filter could
// not decide if it could not (the object is then selected); ev, when not
// nil, shares what filters evaluate (see evaluation).
func (s *Selector) Matches(o *state.Object, ev *Evaluation) state.Verdict {
	if !s.MatchesBase(o) {
		return state.Verdict{}
	}
	if s.filter == nil {
		return state.Verdict{Match: true}
	}
	return ev.Matches(s.filter, o, s.filterErrors)
}

// MatchesBase reports whether the selector's namespace, label and field
// selectors select o: whether its filter, if any, is evaluated on o.
func (s *Selector) MatchesBase(o *state.Object) bool {
	if s.namespace != "" && o.Namespace != s.namespace {
		return false
	}
	if s.labels != nil && !s.labels.Matches(o.Labels) {
		return false
	}
	if s.shard != nil && !s.shard.Matches(o.UID, o.Namespace) {
		return false
	}
	return s.fields == nil || s.fields.Matches(objectFields{o: o, set: s.fieldSet})
}

// Variant says how a subscriber sees a record, following the Kubernetes watch
// cache: an object that starts matching is ADDED, one that stops matching is
// DELETED (with its last matching state). undecided is why the filter could
// not decide on a state that made the variant, the one the event carries
// first.
func (s *Selector) Variant(r *state.Record, ev *Evaluation) (state.Variant, *FilterError) {
	var prev, cur state.Verdict // the zero verdict: not evaluated, no match
	if r.Type != event.Added && r.Previous != nil {
		prev = s.Matches(r.Previous, ev)
	}
	if r.Type != event.Deleted {
		cur = s.Matches(r.Object, ev)
	}
	// Only a verdict that selects carries a reason (see verdict): those of
	// the states that made the variant.
	undecided := cmp.Or(cur.Undecided, prev.Undecided)
	switch {
	case r.Type == event.Added && cur.Match, r.Type == event.Deleted && prev.Match, cur.Match && prev.Match:
		return state.VariantOwn, undecided
	case r.Type == event.Modified && cur.Match:
		return state.VariantEnter, undecided
	case r.Type == event.Modified && prev.Match:
		return state.VariantLeave, undecided
	}
	return state.VariantNone, nil
}

// Truncate shortens s for a log line or a reason.
func Truncate(s string) string { return TruncateTo(s, 64) }

// TruncateTo shortens s to at most max bytes and an ellipsis, cutting
// before a character rather than through it: a reason stays valid UTF-8,
// which a gRPC status message must be.
func TruncateTo(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max] + "..."
}

// objectFields is an object as a fields.Fields, for the field selectors of
// its resource type's field set.
type objectFields struct {
	o   *state.Object
	set *fieldset.Set
}

func (f objectFields) Has(name string) bool { return f.set.Spec(name) != nil }

func (f objectFields) Get(name string) string {
	spec := f.set.Spec(name)
	if spec == nil {
		return ""
	}
	return f.o.Field(spec)
}

// TriggerKind says which equality a group is indexed by.
type TriggerKind uint8

const (
	TriggerName      TriggerKind = iota + 1 // metadata.name
	TriggerField                            // another field of a field selector
	TriggerLabel                            // a label
	TriggerNamespace                        // the namespace, or metadata.namespace
)

// Trigger is an equality an object satisfies: its name, its namespace, a
// field's value or a label's.
type Trigger struct {
	Kind  TriggerKind
	Key   string // the field or label key; "" for names and namespaces
	Value string
}

// LabelPair is an equality requirement of a label selector: the key has
// exactly the value.
type LabelPair struct{ Key, Value string }

// CarriedBy reports whether o has the label.
func (p LabelPair) CarriedBy(o *state.Object) bool {
	v, ok := o.Labels[p.Key]
	return ok && v == p.Value
}

// Equalities returns the requirements of s that an index can serve: k=v,
// k==v and k in (v). Every object s selects carries each of them.
func Equalities(s labels.Selector) []LabelPair {
	if s == nil {
		return nil
	}
	reqs, selectable := s.Requirements()
	if !selectable {
		return nil
	}
	var pairs []LabelPair
	for i := range reqs {
		r := &reqs[i]
		switch r.Operator() {
		case k8sselection.Equals, k8sselection.DoubleEquals, k8sselection.In:
			if values := r.ValuesUnsorted(); len(values) == 1 {
				pairs = append(pairs, LabelPair{Key: r.Key(), Value: values[0]})
			}
		}
	}
	return pairs
}

// Given returns what s asks of an object known to carry the label p: s
// without the label requirements on p's key that p satisfies (a
// requirement reads its key's value only). A cursor over a label index's
// tree of p, every object of which carries p, matches with it; when p was
// all s asked besides its namespace (SelectsWholeNamespaces), it matches
// without reading an object's labels at all. It is for matching only: its
// key and fingerprints stay s's.
func (s *Selector) Given(p LabelPair) *Selector {
	if s.labels == nil {
		return s
	}
	reqs, selectable := s.labels.Requirements()
	if !selectable {
		return s
	}
	carried := labels.Set{p.Key: p.Value}
	rest := reqs[:0:0]
	for _, r := range reqs {
		if r.Key() != p.Key || !r.Matches(carried) {
			rest = append(rest, r)
		}
	}
	if len(rest) == len(reqs) {
		return s
	}
	given := *s
	given.labels = nil
	if len(rest) > 0 {
		given.labels = labels.NewSelector().Add(rest...)
	}
	return &given
}

// CountFilterErrors makes the selector count its filter's failed
// evaluations in c; it is called once, before the selector is shared.
func (s *Selector) CountFilterErrors(c *atomic.Uint64) { s.filterErrors = c }
