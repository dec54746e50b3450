package checker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// The event types, as Event.Type holds them.
const (
	Added    = "ADDED"
	Modified = "MODIFIED"
	Deleted  = "DELETED"
	Bookmark = "BOOKMARK"
)

// Event is one event as the checker compares it.
type Event struct {
	Type            string // Added, Modified, Deleted or Bookmark
	Namespace, Name string
	UID             string
	// ResourceVersion is the event's resourceVersion: the object's
	// metadata.resourceVersion, except on a DELETED that a hub's relist found
	// (its Object is the last state the hub had; this is the relist's
	// version); on a bookmark, the response's.
	ResourceVersion string
	Labels          map[string]string
	// Object is the object's JSON in canonical form (see decode); "" on
	// bookmarks. Previous is the state before a MODIFIED, when the
	// subscription asked for it, likewise.
	Object           string
	Previous         string
	ResumeToken      string
	InitialEventsEnd bool
	// FromRelist is the hub's mark on a difference a relist found.
	FromRelist bool
	// Undecided is set when the hub marked the event with a filter_error:
	// its filter could not decide on a state that made the event.
	Undecided bool
}

var eventTypes = map[informerhubv1.EventType]string{
	informerhubv1.EventType_EVENT_TYPE_ADDED:    Added,
	informerhubv1.EventType_EVENT_TYPE_MODIFIED: Modified,
	informerhubv1.EventType_EVENT_TYPE_DELETED:  Deleted,
	informerhubv1.EventType_EVENT_TYPE_BOOKMARK: Bookmark,
}

// FromWatchResponse converts a response of the hub.
func FromWatchResponse(resp *informerhubv1.WatchResponse) (Event, error) {
	typ, ok := eventTypes[resp.GetType()]
	if !ok {
		return Event{}, fmt.Errorf("unknown event type %v", resp.GetType())
	}
	e := Event{Type: typ, ResourceVersion: resp.GetResourceVersion(), ResumeToken: resp.GetResumeToken(),
		InitialEventsEnd: resp.GetInitialEventsEnd(), FromRelist: resp.GetFromRelist(), Undecided: resp.GetFilterError() != ""}
	if _, err := parseRV(e.ResourceVersion); err != nil {
		return Event{}, err
	}
	if typ == Bookmark {
		return e, nil
	}
	object, previous := []byte(resp.GetObject()), []byte(resp.GetPreviousObject())
	if s := resp.GetObjectStruct(); s != nil { // OBJECT_FORMAT_STRUCT
		var err error
		if object, err = protojson.Marshal(s); err != nil {
			return Event{}, err
		}
	}
	if s := resp.GetPreviousObjectStruct(); s != nil {
		var err error
		if previous, err = protojson.Marshal(s); err != nil {
			return Event{}, err
		}
	}
	if len(previous) > 0 {
		var err error
		if e.Previous, err = Canonical(previous); err != nil {
			return Event{}, err
		}
	}
	return e, e.setObject(object)
}

// Canonical is an object's JSON in the form Events hold it (see decode).
func Canonical(raw []byte) (string, error) {
	obj, err := decode(raw)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(obj)
	return string(b), err
}

// FromAPIEvent converts an event of a dynamic client's watch, whose objects
// are *unstructured.Unstructured. An ERROR event becomes the error it
// carries.
func FromAPIEvent(e watch.Event) (Event, error) {
	switch e.Type {
	case watch.Error:
		return Event{}, apierrors.FromObject(e.Object)
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
	default:
		return Event{}, fmt.Errorf("unknown event type %q", e.Type)
	}
	u, ok := e.Object.(*unstructured.Unstructured)
	if !ok {
		return Event{}, fmt.Errorf("%s event of a %T, want *unstructured.Unstructured", e.Type, e.Object)
	}
	return fromObject(string(e.Type), u)
}

func fromObject(typ string, u *unstructured.Unstructured) (Event, error) {
	e := Event{Type: typ, ResourceVersion: u.GetResourceVersion()}
	if _, err := parseRV(e.ResourceVersion); err != nil {
		return Event{}, err
	}
	if typ == Bookmark {
		return e, nil
	}
	raw, err := json.Marshal(u.Object)
	if err != nil {
		return Event{}, err
	}
	return e, e.setObject(raw)
}

func (e *Event) setObject(raw []byte) error {
	obj, err := decode(raw)
	if err != nil {
		return err
	}
	u := unstructured.Unstructured{Object: obj}
	e.Namespace, e.Name, e.UID, e.Labels = u.GetNamespace(), u.GetName(), string(u.GetUID()), u.GetLabels()
	b, err := json.Marshal(obj) // sorts the keys
	e.Object = string(b)
	return err
}

// decode decodes a JSON object into the form Events compare. Numbers become
// int64 when they are integers that fit, float64 otherwise, which is what
// Unstructured holds: the API server's objects, which reach the reference
// through Unstructured, and the hub's JSON then encode alike. And
// metadata.managedFields is dropped, as a hub may strip it.
func decode(raw []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var obj map[string]any
	if err := d.Decode(&obj); err != nil || obj == nil {
		return nil, fmt.Errorf("not a JSON object (%v): %.200s", err, raw)
	}
	unstructured.RemoveNestedField(obj, "metadata", "managedFields")
	normalize(obj)
	return obj, nil
}

func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = normalize(x)
		}
	case []any:
		for i, x := range v {
			v[i] = normalize(x)
		}
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		if f, err := v.Float64(); err == nil {
			return f
		}
	}
	return v
}

// withResourceVersion returns a canonical object with its
// metadata.resourceVersion replaced, as a watch sends an object that stopped
// matching its selector.
func withResourceVersion(object, rv string) string {
	obj, err := decode([]byte(object))
	if err != nil {
		return object
	}
	_ = unstructured.SetNestedField(obj, rv, "metadata", "resourceVersion")
	b, _ := json.Marshal(obj)
	return string(b)
}

// objectRV is the metadata.resourceVersion of e's object.
func objectRV(e Event) string {
	var m struct {
		Metadata struct{ ResourceVersion string } `json:"metadata"`
	}
	if json.Unmarshal([]byte(e.Object), &m) != nil || m.Metadata.ResourceVersion == "" {
		return e.ResourceVersion
	}
	return m.Metadata.ResourceVersion
}

func parseRV(s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("resourceVersion %q is not a decimal integer", s)
	}
	return v, nil
}

// rv is parseRV for versions already checked; an Event built by hand with a
// bad one sorts first.
func rv(s string) uint64 {
	v, _ := parseRV(s)
	return v
}

// describe names an event, for messages.
func describe(e Event) string {
	if e.Type == Bookmark {
		return "BOOKMARK at " + e.ResourceVersion
	}
	return e.Type + " " + state(e)
}

// state names an object's state, for messages.
func state(e Event) string {
	key := e.Name
	if e.Namespace != "" {
		key = e.Namespace + "/" + e.Name
	}
	return fmt.Sprintf("%s (uid %s, resourceVersion %s)", key, e.UID, e.ResourceVersion)
}
