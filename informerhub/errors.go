package informerhub

import "github.com/informerhub/informerhub/informerhub/internal/errs"

// The errors the hub returns are defined in package internal/errs, beneath
// every layer that makes them; these are their names here. Every error the
// Hub returns matches one of the sentinels with errors.Is; the typed errors
// carry the details a transport needs to tell the client what to do.

// Sentinel errors.
var (
	// ErrInvalidRequest: a request field is malformed or not allowed
	// (*RequestError names it).
	ErrInvalidRequest = errs.ErrInvalidRequest
	// ErrInvalidToken: a resume token is garbage, or was issued for another
	// resource or selector (*RequestError).
	ErrInvalidToken = errs.ErrInvalidToken
	// ErrUnknownResource: the cluster does not serve the resource
	// (*ResourceError).
	ErrUnknownResource = errs.ErrUnknownResource
	// ErrTokenExpired: a resume token cannot be continued from
	// (*ExpiredError): the API server no longer has its resourceVersion, or
	// it is a position inside initial events or a relist that the hub's
	// history no longer holds. The client must start over from a snapshot
	// or with initial events.
	ErrTokenExpired = errs.ErrTokenExpired
	// ErrTokenAhead: a resume token is newer than anything this hub has seen
	// (it came from another hub that was ahead). Retrying shortly works.
	ErrTokenAhead = errs.ErrTokenAhead
	// ErrSubscriberTooSlow: a subscriber fell behind further than the
	// history (*TooSlowError carries the token to resume from).
	ErrSubscriberTooSlow = errs.ErrSubscriberTooSlow
	// ErrUnavailable: the hub cannot serve the resource now, typically because
	// the API server cannot be reached or refuses the hub. Retrying later may
	// work.
	ErrUnavailable = errs.ErrUnavailable
	// ErrLimitExceeded: a request would take a resource type past one of
	// the hub's limits on what its subscribers ask for at once, such as
	// distinct filters or projections (*LimitError). Retrying later, or
	// asking for what others already do, may work.
	ErrLimitExceeded = errs.ErrLimitExceeded
	// ErrClosed: the hub is shutting down.
	ErrClosed = errs.ErrClosed
	// ErrSubscriptionClosed: Next was called on, or was waiting in, a
	// subscription that has been closed.
	ErrSubscriptionClosed = errs.ErrSubscriptionClosed
)

// Names of request fields, for RequestError.Field.
const (
	FieldSelector          = errs.FieldSelector
	FieldGroup             = errs.FieldGroup
	FieldResource          = errs.FieldResource
	FieldVersion           = errs.FieldVersion
	FieldNamespace         = errs.FieldNamespace
	FieldLabelSelector     = errs.FieldLabelSelector
	FieldFieldSelector     = errs.FieldFieldSelector
	FieldFilter            = errs.FieldFilter
	FieldShardSelector     = errs.FieldShardSelector
	FieldFields            = errs.FieldFields
	FieldObjectFormat      = errs.FieldObjectFormat
	FieldResumeToken       = errs.FieldResumeToken
	FieldSendInitialEvents = errs.FieldSendInitialEvents
	FieldGroupBy           = errs.FieldGroupBy
)

// Names of the limits of LimitError.
const (
	LimitFilters             = errs.LimitFilters
	LimitProjections         = errs.LimitProjections
	LimitFiltersPerOwner     = errs.LimitFiltersPerOwner
	LimitProjectionsPerOwner = errs.LimitProjectionsPerOwner
	LimitReplayState         = errs.LimitReplayState
	LimitMemoryBudget        = errs.LimitMemoryBudget
	LimitCountGroups         = errs.LimitCountGroups
	LimitCountGroupBytes     = errs.LimitCountGroupBytes
)

// RequestError reports a request field the hub cannot accept.
type RequestError = errs.RequestError

// ResourceError reports a resource type the hub cannot serve.
type ResourceError = errs.ResourceError

// ExpiredError reports a resume token that cannot be continued from.
type ExpiredError = errs.ExpiredError

// TooSlowError ends a subscriber that fell behind further than the history.
type TooSlowError = errs.TooSlowError

// ObjectError reports an object the hub cannot make an event of.
type ObjectError = errs.ObjectError

// LimitError refuses a request that would take a resource type past one of the hub's limits.
type LimitError = errs.LimitError
