package informerhub

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/informerhub/informerhub/informerhub/internal/fanout"
	"github.com/informerhub/informerhub/informerhub/internal/selection"
	"github.com/informerhub/informerhub/informerhub/internal/token"
	"github.com/informerhub/informerhub/informerhub/projection"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// Selector chooses objects of one resource type, with the meaning
// Kubernetes gives a LIST or WATCH request, and a filter and a shard
// selector besides. It is defined in package internal/selection, which
// parses it and owns both what the API server evaluates of it and what
// the hub matches itself; see selection.Spec for its fields.
type Selector = selection.Spec

// WatchRequest asks for a subscription.
type WatchRequest struct {
	Selector Selector
	// ResumeToken, when set, starts right after the event that carried it.
	ResumeToken string
	// SendInitialEvents first sends every matching object (as of the
	// resume token, or now), then a bookmark with InitialEventsEnd.
	SendInitialEvents bool
	// Fields keeps only these paths of each object (see package projection);
	// empty keeps whole objects. A MODIFIED that changes none of them is
	// not sent.
	Fields []string
	// IncludePrevious makes MODIFIED events carry the state before the
	// change (Event.PreviousObject).
	IncludePrevious bool
	// Encoding is the form Config.EncodeEvent encodes the subscription's
	// events in, below MaxEncodings.
	Encoding Encoding
	// Owner names who asks, for the limits that keep one client from
	// taking what a resource type's subscribers share
	// (Config.MaxFiltersPerOwner, MaxProjectionsPerOwner). A transport
	// sets it to the caller's identity; "" is no one, and not limited.
	Owner string
	// Woken, when set, counts the subscription while its reader has
	// been woken for deliveries it has not taken; a transport shares one
	// among the subscriptions of a connection (see Woken).
	Woken *Woken
}

// SnapshotRequest asks for a snapshot.
type SnapshotRequest struct {
	Selector Selector
	// Fields keeps only these paths of each object, as in WatchRequest.
	Fields []string
}

// parseFields validates the paths of a request's fields (a projection):
// a *RequestError on FieldFields when they do not parse. It returns nil for
// none.
func parseFields(paths []string, max int) (*projection.Projection, error) {
	p, err := projection.Parse(paths, max)
	if err == nil {
		return p, nil
	}
	var pathErr *projection.PathError
	switch {
	case errors.As(err, &pathErr):
		return nil, &RequestError{Field: FieldFields, Err: ErrInvalidRequest, Reason: fmt.Sprintf("%q: %v", selection.Truncate(pathErr.Path), pathErr.Err)}
	default:
		return nil, &RequestError{Field: FieldFields, Err: ErrInvalidRequest, Reason: err.Error()}
	}
}

// checkToken decodes a request's resume token, and checks that it is of the
// resource type, and of the selector for one of initial events.
func checkToken(s string, info upstream.ResourceInfo, sel *selection.Selector) (*token.Token, error) {
	tok, err := token.Decode(s)
	if err != nil {
		return nil, &RequestError{Field: FieldResumeToken, Err: ErrInvalidToken, Reason: err.Error()}
	}
	if want := upstream.FormatResource(info.Resource); tok.Resource != want {
		return nil, &RequestError{Field: FieldResumeToken, Err: ErrInvalidToken,
			Reason: "resume token was issued for " + strconv.Quote(tok.Resource) + ", not " + strconv.Quote(want)}
	}
	if tok.Initial && tok.Selector != sel.Fingerprint() && tok.Selector != sel.LegacyFingerprint() {
		return nil, &RequestError{Field: FieldResumeToken, Err: ErrInvalidToken,
			Reason: "resume token was issued during the initial events of a different selector: resume with the same namespace and selectors, or start over"}
	}
	return tok, nil
}

// Woken counts, of the subscriptions that share it, those whose readers
// their feed has woken for deliveries and that have not yet handed the
// events to their transport (Subscription.Handed); see fanout.Woken for
// how, and server/cork for why.
type Woken = fanout.Woken

// QueueBytes is the most a live subscriber's queue of size changes holds in
// the hub's memory budget (Config.MemoryBudget), when full; 0 takes the
// default size.
func QueueBytes(size int) int64 {
	if size <= 0 {
		size = DefaultQueueSize
	}
	return fanout.QueueBytes(size)
}
