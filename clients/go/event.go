package hubclient

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsjson "sigs.k8s.io/json"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// EventType says what an Event reports. The values are those of
// k8s.io/apimachinery/pkg/watch.EventType.
type EventType string

const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
	Bookmark EventType = "BOOKMARK"
)

var eventTypes = map[informerhubv1.EventType]EventType{
	informerhubv1.EventType_EVENT_TYPE_ADDED:    Added,
	informerhubv1.EventType_EVENT_TYPE_MODIFIED: Modified,
	informerhubv1.EventType_EVENT_TYPE_DELETED:  Deleted,
	informerhubv1.EventType_EVENT_TYPE_BOOKMARK: Bookmark,
}

// Event is one event of a Watch.
type Event struct {
	Type EventType
	// Object is the object as JSON, as the API server served it, projected
	// by WatchOptions.Fields; nil for bookmarks. A DELETED produced by a
	// re-sync (the object vanished, or stopped matching, while the watch
	// could not follow) carries the last state this watch delivered with
	// IncludePrevious, and otherwise the object's identity only:
	// apiVersion, kind, and metadata name, namespace, uid and
	// resourceVersion of that state.
	Object []byte
	// Previous is, on a MODIFIED of a watch with IncludePrevious, the
	// object's state before the change as JSON, projected like Object; nil
	// otherwise. On a MODIFIED produced by a re-sync it is the state this
	// watch delivered last, which may be several changes before Object.
	// Decode it with DecodeJSON.
	Previous []byte
	// ResourceVersion is the event's Kubernetes resourceVersion;
	// informational.
	ResourceVersion string
	// ResumeToken resumes a watch right after this event.
	ResumeToken string
	// InitialEventsEnd is set on the bookmark that ends the initial events.
	InitialEventsEnd bool
	// FromRelist is set on a change the hub found by relisting rather than
	// by watching (WatchResponse.from_relist): the API server could not
	// say what happened in between, only how the object differs. An audit
	// consumer should treat the span as a gap.
	FromRelist bool
	// FilterError is set when the watch's filter could not decide on the
	// object (WatchResponse.filter_error): its evaluation failed (a missing
	// field: guard it with has()) or exceeded the hub's cost limit. The
	// event is delivered as if the filter matched.
	FilterError string
	// Resync is set on the events of a re-sync: the hub could no longer
	// resume the watch (its token expired), so the watch listed again and
	// reported the differences from what it had delivered. The re-sync ends
	// with a bookmark that has Resync set too (and InitialEventsEnd, if the
	// initial events had not ended yet).
	Resync bool
	// ResyncReplaces is set on the events of a re-sync that lists every
	// object rather than the differences, because the watch did not know
	// everything its caller holds (it started from a ResumeToken): the
	// caller should drop whatever it holds that the re-sync did not list.
	ResyncReplaces bool
}

func eventOf(resp *informerhubv1.WatchResponse) Event {
	e := Event{
		Type:             eventTypes[resp.GetType()],
		ResourceVersion:  resp.GetResourceVersion(),
		ResumeToken:      resp.GetResumeToken(),
		InitialEventsEnd: resp.GetInitialEventsEnd(),
		FromRelist:       resp.GetFromRelist(),
		FilterError:      resp.GetFilterError(),
	}
	if o := resp.GetObject(); o != "" {
		e.Object = []byte(o)
	}
	if o := resp.GetPreviousObject(); o != "" {
		e.Previous = []byte(o)
	}
	return e
}

// Unstructured decodes the event's object. Bookmarks have none.
func (e Event) Unstructured() (*unstructured.Unstructured, error) {
	if e.Object == nil {
		return nil, fmt.Errorf("hubclient: a %s event has no object", e.Type)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(e.Object); err != nil {
		return nil, fmt.Errorf("hubclient: decoding the object: %w", err)
	}
	return u, nil
}

// Decode decodes the event's object into a typed API object, such as
// corev1.Pod:
//
//	pod, err := hubclient.Decode[corev1.Pod](event)
//
// A projected object (WatchOptions.Fields) decodes too: what was not sent
// keeps its zero value.
func Decode[T any](e Event) (*T, error) {
	return DecodeJSON[T](e.Object)
}

// DecodeJSON decodes an object's JSON (a snapshot's, say) into a typed API
// object as the Kubernetes API machinery does: field names are
// case-sensitive and integers stay integers; unknown fields are ignored.
func DecodeJSON[T any](data []byte) (*T, error) {
	if data == nil {
		return nil, fmt.Errorf("hubclient: no object to decode")
	}
	out := new(T)
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, out); err != nil {
		return nil, fmt.Errorf("hubclient: decoding %T: %w", out, err)
	}
	return out, nil
}
