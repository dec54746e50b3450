package auth

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/singleflight"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/cache"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// Attributes are what a caller asks to do.
type Attributes struct {
	Verb      string // "list" or "watch"
	Resource  schema.GroupVersionResource
	Namespace string // "" for all namespaces, or a cluster-scoped resource
}

func (a Attributes) String() string {
	where := "cluster-wide"
	if a.Namespace != "" {
		where = "in namespace " + a.Namespace
	}
	return fmt.Sprintf("%s %s %s", a.Verb, resourceName(a.Resource), where)
}

func resourceName(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Resource
	}
	return gvr.Resource + "." + gvr.Group
}

// Authorizer decides what a user may do.
type Authorizer interface {
	// Authorize tells whether user may do attrs. It may answer from a
	// decision it made less than maxAge ago (and within its own cache
	// lifetimes). An error means it cannot tell now.
	Authorize(ctx context.Context, user User, attrs Attributes, maxAge time.Duration) (allowed bool, err error)
}

// AlwaysAllow allows everything, for --auth=none.
type AlwaysAllow struct{}

func (AlwaysAllow) Authorize(context.Context, User, Attributes, time.Duration) (bool, error) {
	return true, nil
}

// SubjectAccessReviewConfig tunes a SubjectAccessReview authorizer.
type SubjectAccessReviewConfig struct {
	// AllowTTL is how long an allowed decision is reused. Default: 5m.
	AllowTTL time.Duration
	// DenyTTL is how long a denied decision is reused. Default: 30s.
	DenyTTL time.Duration
	// MaxStale is how long past AllowTTL an allowed decision stands in
	// while the API server cannot answer: nobody can change RBAC while it
	// is down, and an outage should end no stream. A denial it gives once
	// back ends them. Default: 10m.
	MaxStale time.Duration
	// CacheSize bounds the decisions remembered, allowed and denied
	// apart, so denials never push out allowed decisions. Default: 10000.
	CacheSize int
	// RecheckClient, when set, makes the reviews asked for with a context
	// from ForRecheck (running streams' rechecks), so that they have a
	// budget of their own that new calls cannot use up.
	RecheckClient authorizationclient.SubjectAccessReviewInterface
}

// SubjectAccessReview authorizes by asking the API server with a
// SubjectAccessReview, so the hub grants exactly what the caller's own
// RBAC grants.
type SubjectAccessReview struct {
	client, recheckClient authorizationclient.SubjectAccessReviewInterface
	cfg                   SubjectAccessReviewConfig
	// allowed and denied cache decisions by key: decisionKey -> when it
	// was made.
	allowed, denied *cache.LRUExpireCache
	// flight shares one review among concurrent identical questions (a
	// client opening many streams at once).
	flight singleflight.Group
}

// NewSubjectAccessReview returns a SubjectAccessReview authorizer using
// client.
func NewSubjectAccessReview(client authorizationclient.SubjectAccessReviewInterface, cfg SubjectAccessReviewConfig) *SubjectAccessReview {
	if cfg.AllowTTL <= 0 {
		cfg.AllowTTL = 5 * time.Minute
	}
	if cfg.DenyTTL <= 0 {
		cfg.DenyTTL = 30 * time.Second
	}
	if cfg.MaxStale <= 0 {
		cfg.MaxStale = 10 * time.Minute
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = 10000
	}
	recheckClient := cfg.RecheckClient
	if recheckClient == nil {
		recheckClient = client
	}
	return &SubjectAccessReview{client: client, recheckClient: recheckClient, cfg: cfg,
		allowed: cache.NewLRUExpireCache(cfg.CacheSize), denied: cache.NewLRUExpireCache(cfg.CacheSize)}
}

type recheckKey struct{}

// ForRecheck marks ctx as a running stream's recheck (see
// SubjectAccessReviewConfig.RecheckClient).
func ForRecheck(ctx context.Context) context.Context {
	return context.WithValue(ctx, recheckKey{}, true)
}

// isRecheck reports whether ctx is from ForRecheck.
func isRecheck(ctx context.Context) bool { return ctx.Value(recheckKey{}) != nil }

func (a *SubjectAccessReview) Authorize(ctx context.Context, user User, attrs Attributes, maxAge time.Duration) (bool, error) {
	key := decisionKey(user, attrs)
	cached := func() (allowed, ok bool) {
		if at, ok := a.denied.Get(key); ok && time.Since(at.(time.Time)) < maxAge {
			return false, true
		}
		if at, ok := a.allowed.Get(key); ok && time.Since(at.(time.Time)) < min(maxAge, a.cfg.AllowTTL) {
			return true, true
		}
		return false, false
	}
	if allowed, ok := cached(); ok {
		return allowed, nil
	}
	client, flightKey := a.client, key+"\x00admission"
	if isRecheck(ctx) {
		client, flightKey = a.recheckClient, key+"\x00recheck"
	}
	if maxAge <= 0 {
		// A question that wants a fresh answer does not share one begun
		// earlier, under another budget or for a caller that could wait.
		flightKey += "\x00fresh"
	}
	v, err, _ := a.flight.Do(flightKey, func() (any, error) {
		// A review that just ended may have answered already.
		if allowed, ok := cached(); ok {
			return allowed, nil
		}
		// Shared by several calls: not canceled by the first caller.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
		defer cancel()
		allowed, err := a.review(ctx, client, key, user, attrs)
		if err != nil && cannotAnswer(err) {
			// The API server cannot be reached: an allowed decision it
			// made lately stands in (kept for AllowTTL+MaxStale from
			// then). Not when the hub's own budget ran out or the API
			// server refused the question: then it may well answer others.
			if _, ok := a.allowed.Get(key); ok {
				return true, nil
			}
		}
		return allowed, err
	})
	if err != nil {
		return false, err
	}
	return v.(bool), nil
}

// review asks the API server whether user may do attrs, and caches the
// answer.
func (a *SubjectAccessReview) review(ctx context.Context, client authorizationclient.SubjectAccessReviewInterface, key string, user User, attrs Attributes) (bool, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = v
	}
	review, err := client.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Name, UID: user.UID, Groups: user.Groups, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: attrs.Namespace, Verb: attrs.Verb,
			Group: attrs.Resource.Group, Version: attrs.Resource.Version, Resource: attrs.Resource.Resource,
		},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("asking the API server whether %s may %s: %w", user.Name, attrs, err)
	}
	allowed := review.Status.Allowed && !review.Status.Denied
	if allowed {
		a.allowed.Add(key, time.Now(), a.cfg.AllowTTL+a.cfg.MaxStale)
		a.denied.Remove(key)
	} else {
		a.denied.Add(key, time.Now(), a.cfg.DenyTTL)
		a.allowed.Remove(key)
	}
	return allowed, nil
}

// decisionKey identifies a decision: the whole identity and the request.
// Every part is length-prefixed, so no two identities share an encoding
// whatever bytes their names, groups or extra values hold; the key is its
// SHA-256, so that an identity with many groups (an OIDC token's) costs the
// caches 32 bytes.
func decisionKey(user User, attrs Attributes) string {
	var b []byte
	field := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, part := range []string{user.Name, user.UID, attrs.Verb, attrs.Resource.Group, attrs.Resource.Version, attrs.Resource.Resource, attrs.Namespace} {
		field(part)
	}
	groups := slices.Clone(user.Groups)
	slices.Sort(groups)
	b = binary.AppendUvarint(b, uint64(len(groups)))
	for _, g := range groups {
		field(g)
	}
	keys := make([]string, 0, len(user.Extra))
	for k := range user.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		field(k)
		b = binary.AppendUvarint(b, uint64(len(user.Extra[k])))
		for _, v := range user.Extra[k] {
			field(v)
		}
	}
	sum := sha256.Sum256(b)
	return string(sum[:])
}

// ForbiddenError says that a user may not do something.
type ForbiddenError struct {
	User       string
	Attributes Attributes
}

func (e *ForbiddenError) Error() string {
	return fmt.Sprintf("user %q may not %s", e.User, e.Attributes)
}

// CanWatch checks that user may list and watch the resource in the
// namespace: a *ForbiddenError if not.
func CanWatch(ctx context.Context, a Authorizer, user User, gvr schema.GroupVersionResource, namespace string, maxAge time.Duration) error {
	for _, verb := range []string{"list", "watch"} {
		attrs := Attributes{Verb: verb, Resource: gvr, Namespace: namespace}
		allowed, err := a.Authorize(ctx, user, attrs, maxAge)
		if err != nil {
			return err
		}
		if !allowed {
			return &ForbiddenError{User: user.Name, Attributes: attrs}
		}
	}
	return nil
}

// IsRecheck reports whether ctx is a running stream's recheck (from
// ForRecheck) rather than a new call's: for metrics that tell them apart.
func IsRecheck(ctx context.Context) bool { return isRecheck(ctx) }
