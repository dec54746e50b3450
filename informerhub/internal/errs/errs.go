// Package errs defines the errors the core returns, beneath every layer
// that makes them: each layer returns these, and none may import the
// core's root, which names them again (informerhub.ErrInvalidRequest,
// *informerhub.RequestError and the rest), as grpc-go's status.Status
// names its internal/status. The server maps them to status codes in one
// place.
package errs

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub/upstream"
)

// Sentinel errors. Every error the Hub returns matches one of them with
// errors.Is; the typed errors below carry the details a transport needs to
// tell the client what to do. What each means for a caller is said on the
// core's names of them (informerhub.ErrInvalidRequest and the rest).
var (
	ErrInvalidRequest     = errors.New("invalid request")
	ErrInvalidToken       = errors.New("invalid resume token")
	ErrUnknownResource    = errors.New("unknown resource")
	ErrTokenExpired       = errors.New("resume token expired")
	ErrTokenAhead         = errors.New("resume token is ahead of the hub")
	ErrSubscriberTooSlow  = errors.New("subscriber too slow")
	ErrUnavailable        = errors.New("unavailable")
	ErrLimitExceeded      = errors.New("limit exceeded")
	ErrClosed             = errors.New("hub closed")
	ErrSubscriptionClosed = errors.New("subscription closed")
)

// Names of request fields, for RequestError.Field.
const (
	FieldSelector          = "selector"
	FieldGroup             = "selector.group"
	FieldResource          = "selector.resource"
	FieldVersion           = "selector.version"
	FieldNamespace         = "selector.namespace"
	FieldLabelSelector     = "selector.label_selector"
	FieldFieldSelector     = "selector.field_selector"
	FieldFilter            = "selector.filter"
	FieldShardSelector     = "selector.shard_selector"
	FieldFields            = "fields"
	FieldObjectFormat      = "object_format"
	FieldResumeToken       = "resume_token"
	FieldSendInitialEvents = "send_initial_events"
	FieldGroupBy           = "group_by"
)

// RequestError reports a request field the hub cannot accept.
type RequestError struct {
	Field  string // one of the Field constants
	Reason string // what is wrong, for a person
	Err    error  // ErrInvalidRequest or ErrInvalidToken
}

func (e *RequestError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Reason) }
func (e *RequestError) Unwrap() error { return e.Err }

// ResourceError reports a problem with a resource type as a whole.
type ResourceError struct {
	Resource schema.GroupVersionResource
	Err      error // ErrUnknownResource or an error wrapping ErrUnavailable
}

func (e *ResourceError) Error() string {
	if errors.Is(e.Err, ErrUnknownResource) {
		return fmt.Sprintf("the cluster does not serve resource %q in group version %q; ListResources shows what it serves",
			e.Resource.Resource, e.Resource.GroupVersion().String())
	}
	return fmt.Sprintf("%s: %v", upstream.FormatResource(e.Resource), e.Err)
}

func (e *ResourceError) Unwrap() error { return e.Err }

// ExpiredError reports a resume token the hub cannot continue from.
type ExpiredError struct {
	Resource schema.GroupVersionResource
	// Upstream is set when the API server said the token's resourceVersion
	// is gone (410 Gone, after etcd compacted it); otherwise the token is a
	// position the history no longer holds that cannot be replayed (inside
	// initial events or a relist).
	Upstream bool
	// TooLarge is set when replaying from the token would hold more state
	// than the hub allows all replays (Config.MaxReplayStateBytes).
	TooLarge bool
	// OldestResourceVersion and Oldest are the oldest position the hub's
	// history resumes from, and when the hub reached it; zero when unknown.
	OldestResourceVersion uint64
	Oldest                time.Time
}

func (e *ExpiredError) Error() string {
	if e.TooLarge {
		return fmt.Sprintf("replaying %s from the resume token, with its filter, fields or previous state, would hold more than the hub allows replays: call Snapshot, or Watch with send_initial_events, and continue from there",
			upstream.FormatResource(e.Resource))
	}
	var oldest string
	if !e.Oldest.IsZero() {
		oldest = fmt.Sprintf(", which begins at resourceVersion %d, reached %s ago", e.OldestResourceVersion,
			time.Since(e.Oldest).Round(time.Second))
	}
	if e.Upstream {
		return fmt.Sprintf("resume token for %s is older than the API server's history (410 Gone) and the hub's%s: call Snapshot, or Watch with send_initial_events, and continue from there",
			upstream.FormatResource(e.Resource), oldest)
	}
	return fmt.Sprintf("resume token for %s is older than the hub's history%s: call Snapshot, or Watch with send_initial_events, and continue from there",
		upstream.FormatResource(e.Resource), oldest)
}

func (e *ExpiredError) Unwrap() error { return ErrTokenExpired }

// TooSlowError ends a subscription that did not keep up: it fell behind
// further than the history holds, or (Stalled) its client stopped reading.
type TooSlowError struct {
	Resource schema.GroupVersionResource
	// ResumeToken is the token of the last event the subscription delivered
	// (or the one it started from): resuming from it loses nothing. Empty
	// for a Count.
	ResumeToken string
	// Stalled is set by a transport that ended the stream because its
	// client read nothing for a while.
	Stalled bool
	// Counting is set, with Stalled, by a transport that ended a Count
	// stream because its client read nothing of the counts for a while.
	// Counts have no token: the client calls Count again. (A counter
	// that falls behind the history counts afresh, and ends nobody.)
	Counting bool
}

func (e *TooSlowError) Error() string {
	switch {
	case e.Counting:
		return fmt.Sprintf("client read nothing of the counts of %s for too long and was disconnected: call Count again",
			upstream.FormatResource(e.Resource))
	case e.Stalled:
		return fmt.Sprintf("client read nothing of the changes of %s for too long and was disconnected: watch again from the resume token of the last event received",
			upstream.FormatResource(e.Resource))
	}
	return fmt.Sprintf("subscriber fell further behind the changes of %s than the hub's history holds, and was disconnected: watch again from the resume token of the last event received",
		upstream.FormatResource(e.Resource))
}

func (e *TooSlowError) Unwrap() error { return ErrSubscriberTooSlow }

// ObjectError reports an object the hub could not make into what a caller
// asked for: its projection, or the rewrite of its resourceVersion (the
// DELETED of an object that left a selection), failed on its JSON. The API
// server's JSON always allows both, so it is a bug of the hub or an object
// it cannot handle; the call ends rather than send the object otherwise
// than asked (whole, or at the wrong version). It ends every call that
// asks for that object in that form, until the object changes.
type ObjectError struct {
	Resource        schema.GroupVersionResource
	Namespace, Name string
	Err             error
}

func (e *ObjectError) Error() string {
	key := e.Name
	if e.Namespace != "" {
		key = e.Namespace + "/" + e.Name
	}
	return fmt.Sprintf("the hub cannot send %s %s as asked: %v", upstream.FormatResource(e.Resource), key, e.Err)
}

func (e *ObjectError) Unwrap() error { return e.Err }

// LimitError refuses a request that would take a resource type past one of
// the hub's limits on what its subscribers may ask for at once.
type LimitError struct {
	Resource schema.GroupVersionResource
	Limit    string // LimitFilters or LimitProjections
	Max      int
}

// Names of the limits of LimitError.
const (
	LimitFilters             = "max-filters-per-resource"
	LimitProjections         = "max-projections-per-resource"
	LimitFiltersPerOwner     = "max-filters-per-identity"
	LimitProjectionsPerOwner = "max-projections-per-identity"
	LimitReplayState         = "max-replay-state-bytes"
	LimitMemoryBudget        = "memory-budget"
	// LimitCountGroups: a Count's objects fall in more groups than
	// Config.MaxCountGroups; LimitCountGroupBytes: one's group value is
	// longer than MaxCountGroupBytes.
	LimitCountGroups     = "max-count-groups"
	LimitCountGroupBytes = "count-group-value-bytes"
)

func (e *LimitError) Error() string {
	r := upstream.FormatResource(e.Resource)
	switch e.Limit {
	case LimitReplayState:
		return fmt.Sprintf("replaying %s from the API server with a filter, projection or previous state would take the hub's replays past %d bytes of state (%s): retry later, or resume from a newer token",
			r, e.Max, e.Limit)
	case LimitMemoryBudget:
		return fmt.Sprintf("this snapshot or these initial events of %s were read so slowly that the objects changed since they began took the hub past its memory budget (%s, %d bytes): take the snapshot again, or watch again from the last token received, and read faster, or select fewer objects",
			r, e.Limit, e.Max)
	case LimitCountGroups:
		return fmt.Sprintf("the objects of this Count of %s fall in more than %d groups, the most the hub keeps (%s): group by a field of fewer values, or select fewer objects", r, e.Max, e.Limit)
	case LimitCountGroupBytes:
		return fmt.Sprintf("an object of this Count of %s has a group value longer than %d bytes, the most the hub keeps (%s): group by a field of short values", r, e.Max, e.Limit)
	case LimitProjections:
		return fmt.Sprintf("%d distinct projections (fields) are in use on %s, the most the hub allows (%s): use a projection other clients use, or retry later", e.Max, r, e.Limit)
	case LimitFiltersPerOwner:
		return fmt.Sprintf("your streams hold %d distinct filters on %s, the most the hub allows one identity (%s): reuse one of them, or close a stream", e.Max, r, e.Limit)
	case LimitProjectionsPerOwner:
		return fmt.Sprintf("your streams hold %d distinct projections (fields) on %s, the most the hub allows one identity (%s): reuse one of them, or close a stream", e.Max, r, e.Limit)
	}
	return fmt.Sprintf("%d distinct filters are in use on %s, the most the hub allows (%s): use an expression other clients use, or retry later", e.Max, r, e.Limit)
}

func (e *LimitError) Unwrap() error { return ErrLimitExceeded }
