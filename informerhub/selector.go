package informerhub

import (
	"fmt"
	"hash/fnv"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Selector chooses objects of one resource type, with the meaning Kubernetes
// gives a LIST or WATCH request.
type Selector struct {
	Resource schema.GroupVersionResource
	// Namespace restricts to one namespace; "" means all namespaces.
	Namespace string
	// LabelSelector in Kubernetes syntax; "" selects everything.
	LabelSelector string
	// FieldSelector on metadata.name and metadata.namespace; "" selects
	// everything.
	FieldSelector string
}

const supportedFieldsString = "metadata.name, metadata.namespace"

// selector is a parsed Selector.
type selector struct {
	namespace string
	labels    labels.Selector // nil selects everything
	fields    fields.Selector // nil selects everything
	// fingerprint identifies the selector in tokens of initial events.
	fingerprint uint64
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

// parseSelector validates a Selector for a resolved resource type, within
// the limits of cfg, so no request can make the hub parse or match without
// bound.
func parseSelector(s Selector, info ResourceInfo, cfg *Config) (*selector, error) {
	maxSelectorLength, maxSelectorTerms := cfg.MaxSelectorLength, cfg.MaxSelectorTerms
	sel := &selector{namespace: s.Namespace}
	if s.Namespace != "" {
		if !info.Namespaced {
			return nil, &RequestError{Field: FieldNamespace, Err: ErrInvalidRequest,
				Reason: fmt.Sprintf("%s is cluster-scoped: namespace must be empty", FormatResource(info.Resource))}
		}
		if errs := validation.IsDNS1123Label(s.Namespace); len(errs) > 0 {
			return nil, &RequestError{Field: FieldNamespace, Err: ErrInvalidRequest,
				Reason: fmt.Sprintf("%q is not a valid namespace: %s", truncate(s.Namespace), strings.Join(errs, "; "))}
		}
	}
	if s.LabelSelector != "" {
		if len(s.LabelSelector) > maxSelectorLength {
			return nil, &RequestError{Field: FieldLabelSelector, Err: ErrInvalidRequest,
				Reason: fmt.Sprintf("label selector is longer than %d bytes", maxSelectorLength)}
		}
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
		if len(s.FieldSelector) > maxSelectorLength {
			return nil, &RequestError{Field: FieldFieldSelector, Err: ErrInvalidRequest,
				Reason: fmt.Sprintf("field selector is longer than %d bytes", maxSelectorLength)}
		}
		parsed, err := fields.ParseSelector(s.FieldSelector)
		if err != nil {
			return nil, &RequestError{Field: FieldFieldSelector, Err: ErrInvalidRequest, Reason: err.Error()}
		}
		requirements := parsed.Requirements()
		if len(requirements) > maxSelectorTerms {
			return nil, &RequestError{Field: FieldFieldSelector, Err: ErrInvalidRequest,
				Reason: fmt.Sprintf("field selector has %d terms; at most %d are allowed", len(requirements), maxSelectorTerms)}
		}
		for _, r := range requirements {
			if r.Field != "metadata.name" && r.Field != "metadata.namespace" {
				return nil, &RequestError{Field: FieldFieldSelector, Err: ErrInvalidRequest,
					Reason: fmt.Sprintf("field %q is not supported; supported fields: %s", truncate(r.Field), supportedFieldsString)}
			}
			if r.Field == "metadata.namespace" && !info.Namespaced {
				// The API server refuses it too, and the hub replays
				// with the same selector.
				return nil, &RequestError{Field: FieldFieldSelector, Err: ErrInvalidRequest,
					Reason: fmt.Sprintf("%s is cluster-scoped: its objects have no metadata.namespace; select on metadata.name", FormatResource(info.Resource))}
			}
			if r.Operator != selection.Equals && r.Operator != selection.DoubleEquals && r.Operator != selection.NotEquals {
				return nil, &RequestError{Field: FieldFieldSelector, Err: ErrInvalidRequest,
					Reason: fmt.Sprintf("operator %q is not supported; use =, == or !=", r.Operator)}
			}
		}
		if !parsed.Empty() {
			sel.fields = parsed
		}
	}
	h := fnv.New64a()
	for _, part := range []string{s.Namespace, canonical(sel.labels), canonical(sel.fields)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	sel.fingerprint = h.Sum64()
	return sel, nil
}

func canonical(s fmt.Stringer) string {
	if s == nil {
		return ""
	}
	return s.String()
}

// matches reports whether an object is selected.
func (s *selector) matches(o *object) bool {
	if s.namespace != "" && o.namespace != s.namespace {
		return false
	}
	if s.labels != nil && !s.labels.Matches(o.labels) {
		return false
	}
	if s.fields != nil && !s.fields.Matches(o) {
		return false
	}
	return true
}

// variant says how a subscriber sees a record, following the Kubernetes watch
// cache: an object that starts matching is ADDED, one that stops matching is
// DELETED (with its last matching state).
func (s *selector) variant(r *record) variant {
	prev := r.prev != nil && s.matches(r.prev)
	switch r.typ {
	case EventAdded:
		if s.matches(r.obj) {
			return variantOwn
		}
	case EventModified:
		cur := s.matches(r.obj)
		switch {
		case cur && prev:
			return variantOwn
		case cur:
			return variantEnter
		case prev:
			return variantLeave
		}
	case EventDeleted:
		if prev {
			return variantOwn
		}
	}
	return variantNone
}

func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
