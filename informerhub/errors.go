package informerhub

import "github.com/informerhub/informerhub/informerhub/internal/errs"

// The errors the hub returns are defined in package internal/errs, beneath
// every layer that makes them; these are their names here. Every error the
// Hub returns matches one of the sentinels with errors.Is; the typed errors
// carry the details a transport needs to tell the client what to do.

// Sentinel errors: see package internal/errs for what each means.
var (
	ErrInvalidRequest     = errs.ErrInvalidRequest
	ErrInvalidToken       = errs.ErrInvalidToken
	ErrUnknownResource    = errs.ErrUnknownResource
	ErrTokenExpired       = errs.ErrTokenExpired
	ErrTokenAhead         = errs.ErrTokenAhead
	ErrSubscriberTooSlow  = errs.ErrSubscriberTooSlow
	ErrUnavailable        = errs.ErrUnavailable
	ErrLimitExceeded      = errs.ErrLimitExceeded
	ErrClosed             = errs.ErrClosed
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
