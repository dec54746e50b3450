// Package event defines the events a subscription returns, beneath the
// records of a feed's history that build and share them: every layer of
// the core makes, keeps or sends them, and none may import the core's root,
// which names them again (informerhub.Event, EventType, Encoded,
// Encoding). It holds no state and no lock.
package event

import "strconv"

// Type says what an Event reports.
type Type uint8

const (
	Added Type = iota + 1
	Modified
	Deleted
	Bookmark
)

func (t Type) String() string {
	switch t {
	case Added:
		return "ADDED"
	case Modified:
		return "MODIFIED"
	case Deleted:
		return "DELETED"
	case Bookmark:
		return "BOOKMARK"
	}
	return "EventType(" + strconv.Itoa(int(t)) + ")"
}

// Event is one response of a subscription. Events of changes are shared by
// every subscriber that receives them in the same form (projection,
// previous state, encoding): never modify one.
type Event struct {
	Type Type
	// Object is the object's JSON, projected by the subscription's Fields;
	// empty on bookmarks.
	Object string
	// PreviousObject is, on MODIFIED events of a subscription with
	// IncludePrevious, the object's JSON before the change, projected like
	// Object.
	PreviousObject string
	// ResourceVersion is the Kubernetes resourceVersion of the event.
	ResourceVersion string
	// ResumeToken resumes a subscription right after this event.
	ResumeToken string
	// InitialEventsEnd is set on the bookmark that closes initial events.
	InitialEventsEnd bool
	// FromRelist is set on a change a relist found rather than a watch
	// delivered: the API server could not say what happened between the
	// versions before and after the relist (the hub was away longer than
	// the API server's history, or its watch broke), only how the object
	// differs. Intermediate changes there are unknown.
	FromRelist bool
	// FilterError, when set, says why the subscription's filter could not
	// decide on the object (its evaluation failed, or exceeded
	// Config.MaxFilterCost): the object is sent as if it matched. The
	// first such event of a change is shared by the subscribers of one
	// filter and form (see feed.Events.MarkedOf); others are each
	// subscriber's.
	FilterError string
	// Encoding is the subscription's WatchRequest.Encoding, for
	// Config.EncodeEvent.
	Encoding Encoding

	encoded Encoded
	// failure, when set, is why the event could not be made (an
	// *ObjectError): Next ends the subscription with it instead.
	failure error
}

// Encoded returns what Config.EncodeEvent made of the event, computed once
// per event however many subscribers send it; nil without an EncodeEvent.
func (e *Event) Encoded() Encoded { return e.encoded }

// Encoded is what a transport's Config.EncodeEvent makes of an event: the
// bytes it sends, in its own type (grpc's mem.BufferSlice is one), shared
// by every subscriber that sends the event. Len says how many bytes it
// holds: the history counts them with the event.
type Encoded interface {
	Len() int
}

// Encoding is a form a transport sends events in, such as objects as JSON
// strings (0, the default) or as structured values. The hub keeps events of
// different encodings apart and encodes each once (Config.EncodeEvent); what
// each value means is the transport's to say, below MaxEncodings.
type Encoding uint8

// MaxEncodings bounds the encodings a transport may use.
const MaxEncodings = 4

// Unsent is the encoding of the hub's own subscriptions, whose events go
// to no transport (a Count's counter): nothing encodes them.
const Unsent Encoding = MaxEncodings

// SetEncoded records what Config.EncodeEvent made of e, once, before e is
// shared.
func SetEncoded(e *Event, enc Encoded) { e.encoded = enc }

// Fail marks e as an event that could not be made, for err (an
// *informerhub.ObjectError): Next ends the subscription with it instead.
func Fail(e *Event, err error) { e.failure = err }

// Failure returns why e could not be made, or nil.
func Failure(e *Event) error { return e.failure }
