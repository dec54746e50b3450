package informerhub

import (
	"github.com/informerhub/informerhub/informerhub/internal/event"
)

// The events a subscription returns are defined in package
// internal/event, beneath the records that share them (a record builds
// each of its events once, for every subscriber of the same form); these
// are their names here.

// EventType says what an Event reports.
type EventType = event.Type

const (
	EventAdded    = event.Added
	EventModified = event.Modified
	EventDeleted  = event.Deleted
	EventBookmark = event.Bookmark
)

// Event is one response of a subscription; see event.Event. Events of
// changes are shared by every subscriber that receives them in the same
// form (projection, previous state, encoding): never modify one.
type Event = event.Event

// Encoded is what a transport's Config.EncodeEvent makes of an event; see
// event.Encoded.
type Encoded = event.Encoded

// Encoding is a form a transport sends events in; see event.Encoding.
type Encoding = event.Encoding

// MaxEncodings bounds the encodings a transport may use.
const MaxEncodings = event.MaxEncodings

// encodingUnsent is the encoding of the hub's own subscriptions, whose
// events go to no transport (a Count's counter): nothing encodes them.
const encodingUnsent = event.Unsent
