package informerhub

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
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/informerhub/informerhub/informerhub/celfilter"
	"github.com/informerhub/informerhub/informerhub/fieldset"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/shard"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// Selector chooses objects of one resource type, with the meaning Kubernetes
// gives a LIST or WATCH request, and a filter besides.
type Selector struct {
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

// selector is a parsed Selector.
type selector struct {
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
	// select the same objects and share their matching (see dispatch.go).
	key string
	// fingerprint identifies the selection in tokens of initial events
	// (fingerprintOf); legacyFingerprint is what older hubs put there.
	fingerprint, legacyFingerprint uint64
}

// validateResource checks the parts of a Selector that must be present
// before the resource can be looked up.
func validateResource(s Selector) error {
	if s.Resource.Version == "" {
		return &RequestError{Field: FieldVersion, Err: ErrInvalidRequest, Reason: `version is required, e.g. "v1"`}
	}
	if s.Resource.Resource == "" {
		return &RequestError{Field: FieldResource, Err: ErrInvalidRequest, Reason: `resource is required: the plural name, e.g. "configmaps"`}
	}
	// These go into discovery and REST paths: they must be names, never
	// anything a path could make more of.
	if g := s.Resource.Group; g != "" {
		if errs := validation.IsDNS1123Subdomain(g); len(errs) > 0 {
			return &RequestError{Field: FieldGroup, Err: ErrInvalidRequest,
				Reason: fmt.Sprintf("%q is not a valid API group: %s", truncate(g), strings.Join(errs, "; "))}
		}
	}
	if errs := validation.IsDNS1035Label(s.Resource.Version); len(errs) > 0 {
		return &RequestError{Field: FieldVersion, Err: ErrInvalidRequest,
			Reason: fmt.Sprintf("%q is not a valid API version: %s", truncate(s.Resource.Version), strings.Join(errs, "; "))}
	}
	resource, subresource, isSub := strings.Cut(s.Resource.Resource, "/")
	for _, part := range []string{resource, subresource} {
		if part == "" && !isSub {
			continue
		}
		if errs := validation.IsDNS1123Label(part); len(errs) > 0 {
			return &RequestError{Field: FieldResource, Err: ErrInvalidRequest,
				Reason: fmt.Sprintf("%q is not a valid resource name: %s", truncate(s.Resource.Resource), strings.Join(errs, "; "))}
		}
	}
	return nil
}

// checkSyntax checks the namespace's name and the lengths of s's selectors
// and filter.
func checkSyntax(s Selector, cfg *Config) error {
	if s.Namespace != "" {
		if errs := validation.IsDNS1123Label(s.Namespace); len(errs) > 0 {
			return &RequestError{Field: FieldNamespace, Err: ErrInvalidRequest,
				Reason: fmt.Sprintf("%q is not a valid namespace: %s", truncate(s.Namespace), strings.Join(errs, "; "))}
		}
	}
	if len(s.LabelSelector) > cfg.MaxSelectorLength {
		return &RequestError{Field: FieldLabelSelector, Err: ErrInvalidRequest,
			Reason: fmt.Sprintf("label selector is longer than %d bytes", cfg.MaxSelectorLength)}
	}
	if len(s.FieldSelector) > cfg.MaxSelectorLength {
		return &RequestError{Field: FieldFieldSelector, Err: ErrInvalidRequest,
			Reason: fmt.Sprintf("field selector is longer than %d bytes", cfg.MaxSelectorLength)}
	}
	if len(s.ShardSelector) > cfg.MaxSelectorLength {
		return &RequestError{Field: FieldShardSelector, Err: ErrInvalidRequest,
			Reason: fmt.Sprintf("shard selector is longer than %d bytes", cfg.MaxSelectorLength)}
	}
	if len(s.Filter) > cfg.MaxFilterLength {
		return &RequestError{Field: FieldFilter, Err: ErrInvalidRequest,
			Reason: fmt.Sprintf("filter is %d bytes long; at most %d are allowed", len(s.Filter), cfg.MaxFilterLength)}
	}
	return nil
}

// parseSelector validates a Selector for a resolved resource type, within
// the limits of cfg, so no request can make the hub parse or match without
// bound. filters compiles the selector's filter, if it has one.
func parseSelector(s Selector, info upstream.ResourceInfo, cfg *Config, filters *celfilter.Compiler) (*selector, error) {
	if err := checkSyntax(s, cfg); err != nil {
		return nil, err
	}
	maxSelectorTerms := cfg.MaxSelectorTerms
	sel := &selector{namespace: s.Namespace, fieldSet: info.FieldSet()}
	if s.Namespace != "" && !info.Namespaced {
		return nil, &RequestError{Field: FieldNamespace, Err: ErrInvalidRequest,
			Reason: fmt.Sprintf("%s is cluster-scoped: namespace must be empty", upstream.FormatResource(info.Resource))}
	}
	if s.LabelSelector != "" {
		parsed, err := labels.Parse(s.LabelSelector)
		if err != nil {
			return nil, &RequestError{Field: FieldLabelSelector, Err: ErrInvalidRequest, Reason: err.Error()}
		}
		requirements, _ := parsed.Requirements()
		if len(requirements) > maxSelectorTerms {
			return nil, &RequestError{Field: FieldLabelSelector, Err: ErrInvalidRequest,
				Reason: fmt.Sprintf("label selector has %d terms; at most %d are allowed", len(requirements), maxSelectorTerms)}
		}
		if !parsed.Empty() {
			sel.labels = parsed
		}
	}
	if s.FieldSelector != "" {
		parsed, err := parseFieldSelector(s.FieldSelector, info, sel.fieldSet, cfg)
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
			return nil, &RequestError{Field: FieldShardSelector, Err: ErrInvalidRequest,
				Reason: strings.TrimPrefix(err.Error(), shard.ErrInvalid.Error()+": ")}
		}
		if n := len(parsed.Ranges()); n > maxSelectorTerms {
			return nil, &RequestError{Field: FieldShardSelector, Err: ErrInvalidRequest,
				Reason: fmt.Sprintf("shard selector has %d ranges; at most %d are allowed", n, maxSelectorTerms)}
		}
		sel.shard = parsed
	}
	if s.Filter != "" {
		f, err := filters.Compile(s.Filter)
		if err != nil {
			var exprErr *celfilter.Error
			if errors.As(err, &exprErr) {
				return nil, &RequestError{Field: FieldFilter, Err: ErrInvalidRequest, Reason: exprErr.Reason}
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
func legacyFingerprint(sel *selector) uint64 {
	h := fnv.New64a()
	parts := []string{sel.namespace, canonical(sel.labels), canonical(sel.fields)}
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

// parseFieldSelector validates a field selector against the fields of a
// resource type, and returns it with every field by its canonical name.
func parseFieldSelector(s string, info upstream.ResourceInfo, set *fieldset.Set, cfg *Config) (fields.Selector, error) {
	parsed, err := fields.ParseSelector(s)
	if err != nil {
		return nil, &RequestError{Field: FieldFieldSelector, Err: ErrInvalidRequest, Reason: err.Error()}
	}
	if n := len(parsed.Requirements()); n > cfg.MaxSelectorTerms {
		return nil, &RequestError{Field: FieldFieldSelector, Err: ErrInvalidRequest,
			Reason: fmt.Sprintf("field selector has %d terms; at most %d are allowed", n, cfg.MaxSelectorTerms)}
	}
	return parsed.Transform(func(field, value string) (string, string, error) {
		name, ok := set.Canonical(field)
		switch {
		case !ok && field == "metadata.namespace" && !info.Namespaced:
			// The API server refuses it too, and the hub replays with
			// the same selector.
			return "", "", &RequestError{Field: FieldFieldSelector, Err: ErrInvalidRequest,
				Reason: fmt.Sprintf("%s is cluster-scoped: its objects have no metadata.namespace; select on metadata.name", upstream.FormatResource(info.Resource))}
		case !ok:
			return "", "", &RequestError{Field: FieldFieldSelector, Err: ErrInvalidRequest,
				Reason: fmt.Sprintf("field %q is not supported for %s; supported fields: %s", truncate(field), upstream.FormatResource(info.Resource), set.Describe())}
		}
		return name, value, nil
	})
}

// selectorKey is what identifies a selector's selection: its namespace, its
// label and field requirements in a canonical order, and its filter.
func selectorKey(sel *selector) string {
	var fieldTerms []string
	if sel.fields != nil {
		for _, r := range sel.fields.Requirements() {
			op := r.Operator
			if op == selection.DoubleEquals {
				op = selection.Equals
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
			case (op == selection.In || op == selection.DoubleEquals) && len(values) == 1:
				op = selection.Equals
			case op == selection.NotIn && len(values) == 1:
				op = selection.NotEquals
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

// upstreamQuery is how a replay (replay.go) asks the API server for a
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
type upstreamQuery struct {
	namespace     string
	labelSelector string
	fieldSelector string
	// local selects by the parts the API server does not evaluate, and
	// the namespace (a Source that serves other namespaces' objects on a
	// namespace's path sends nothing of them on); nil when there is
	// nothing to evaluate.
	local *selector
	// stateful is set when local's verdict on an object can change as the
	// object changes (a filter, a field other than metadata.name and
	// metadata.namespace): then the upstream watch's MODIFIED may be an
	// object entering or leaving the selection, which only the object's
	// previous verdict tells, and a replay must keep state (see replay).
	// The uid and namespace a shard hashes never change.
	stateful bool
}

// upstreamQuery splits the selector between the API server and the hub;
// withFields says whether the API server evaluates its field selector.
func (s *selector) upstreamQuery(withFields bool) upstreamQuery {
	q := upstreamQuery{namespace: s.namespace}
	if s.labels != nil {
		q.labelSelector = s.labels.String()
	}
	local := &selector{namespace: s.namespace, fieldSet: s.fieldSet, shard: s.shard, filter: s.filter, filterErrors: s.filterErrors}
	switch {
	case s.fields == nil:
	case withFields:
		q.fieldSelector = s.fields.String()
	default:
		local.fields = s.fields
		for _, r := range s.fields.Requirements() {
			if r.Field != "metadata.name" && r.Field != "metadata.namespace" {
				q.stateful = true
			}
		}
	}
	if local.filter != nil {
		q.stateful = true
	}
	if local.namespace != "" || local.fields != nil || local.shard != nil || local.filter != nil {
		q.local = local
	}
	return q
}

// trigger returns the equality the dispatcher indexes the selector by:
// one that every object it selects satisfies, the most selective there is
// (a name, another field, a label, a namespace), or false when it has none.
func (s *selector) trigger() (trigger, bool) {
	var field, namespace *trigger
	if s.namespace != "" {
		namespace = &trigger{kind: triggerNamespace, value: s.namespace}
	}
	if s.fields != nil {
		for _, r := range s.fields.Requirements() {
			if r.Operator != selection.Equals && r.Operator != selection.DoubleEquals {
				continue
			}
			switch r.Field {
			case "metadata.name":
				return trigger{kind: triggerName, value: r.Value}, true
			case "metadata.namespace":
				if namespace == nil {
					namespace = &trigger{kind: triggerNamespace, value: r.Value}
				}
			default:
				if field == nil {
					field = &trigger{kind: triggerField, key: r.Field, value: r.Value}
				}
			}
		}
	}
	if field != nil {
		return *field, true
	}
	if pairs := equalities(s.labels); len(pairs) > 0 {
		return trigger{kind: triggerLabel, key: pairs[0].key, value: pairs[0].value}, true
	}
	if namespace != nil {
		return *namespace, true
	}
	return trigger{}, false
}

func canonical(s fmt.Stringer) string {
	if s == nil {
		return ""
	}
	return s.String()
}

// matches returns whether an object is selected, and why the filter could
// not decide if it could not (the object is then selected); ev, when not
// nil, shares what filters evaluate (see evaluation).
func (s *selector) matches(o *state.Object, ev *evaluation) state.Verdict {
	if !s.matchesBase(o) {
		return state.Verdict{}
	}
	if s.filter == nil {
		return state.Verdict{Match: true}
	}
	return ev.matches(s.filter, o, s.filterErrors)
}

// matchesBase reports whether the selector's namespace, label and field
// selectors select o: whether its filter, if any, is evaluated on o.
func (s *selector) matchesBase(o *state.Object) bool {
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

// variant says how a subscriber sees a record, following the Kubernetes watch
// cache: an object that starts matching is ADDED, one that stops matching is
// DELETED (with its last matching state). undecided is why the filter could
// not decide on a state that made the variant, the one the event carries
// first.
func (s *selector) variant(r *state.Record, ev *evaluation) (state.Variant, *filterError) {
	var prev, cur state.Verdict // the zero verdict: not evaluated, no match
	if r.Type != EventAdded && r.Previous != nil {
		prev = s.matches(r.Previous, ev)
	}
	if r.Type != EventDeleted {
		cur = s.matches(r.Object, ev)
	}
	// Only a verdict that selects carries a reason (see verdict): those of
	// the states that made the variant.
	undecided := cmp.Or(cur.Undecided, prev.Undecided)
	switch {
	case r.Type == EventAdded && cur.Match, r.Type == EventDeleted && prev.Match, cur.Match && prev.Match:
		return state.VariantOwn, undecided
	case r.Type == EventModified && cur.Match:
		return state.VariantEnter, undecided
	case r.Type == EventModified && prev.Match:
		return state.VariantLeave, undecided
	}
	return state.VariantNone, nil
}

// truncate shortens s for a log line or a reason.
func truncate(s string) string { return truncateTo(s, 64) }

// truncateTo shortens s to at most max bytes and an ellipsis, cutting
// before a character rather than through it: a reason stays valid UTF-8,
// which a gRPC status message must be.
func truncateTo(s string, max int) string {
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
