package export

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

// Change is one change a route exports: a watch event of its selection.
type Change struct {
	// Type is ADDED, MODIFIED or DELETED.
	Type      hubclient.EventType
	Resource  schema.GroupVersionResource
	Namespace string
	Name      string
	UID       string
	// ResourceVersion is the object's; a DELETED's, the deletion's.
	ResourceVersion string
	// Object is the object as the API server serves it, JSON.
	Object []byte
	// ResumeToken is the position right after the change: a watch from
	// it continues with the next.
	ResumeToken string
	// FromRelist: the hub found the change by relisting, not watching
	// (Event.FromRelist); Resync: the watch re-synced after its position
	// expired (Event.Resync). Either marks a span whose intermediate
	// changes are unknown.
	FromRelist, Resync bool
	// Gap names the gap a change belongs to, a marker or a difference:
	// the position its GAP_END carries. "" for any other change.
	Gap string
	// Replaces is set on a GAP_END whose differences listed every object
	// as ADDED (the sink is no Holder): the consumer drops what it holds
	// that the gap did not list.
	Replaces bool
}

// changeOf makes the change of a watch event of resource; ok is false for
// events that change nothing (bookmarks).
func changeOf(resource schema.GroupVersionResource, e hubclient.Event) (c Change, ok bool, err error) {
	switch e.Type {
	case hubclient.Added, hubclient.Modified, hubclient.Deleted:
	default:
		return Change{}, false, nil
	}
	m, err := metadataOf(e.Object)
	if err != nil {
		return Change{}, false, fmt.Errorf("export: a %s event's object: %w", e.Type, err)
	}
	return Change{Type: e.Type, Resource: resource, Namespace: m.Namespace, Name: m.Name, UID: m.UID,
		ResourceVersion: m.ResourceVersion, Object: e.Object, ResumeToken: e.ResumeToken,
		FromRelist: e.FromRelist, Resync: e.Resync}, true, nil
}

// objectMeta is what a change needs of an object's metadata.
type objectMeta struct {
	Namespace, Name, UID, ResourceVersion string
}

// metadataOf decodes an object's metadata, reading the object's JSON only
// as far as its metadata: the API server writes it after apiVersion and
// kind, so the rest, the bulk, is not decoded (the profile of issue 41's
// benchmark had whole-object decoding at a quarter of the exporter's CPU).
func metadataOf(object []byte) (objectMeta, error) {
	var m objectMeta
	dec := json.NewDecoder(bytes.NewReader(object))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return m, fmt.Errorf("not a JSON object (%v)", err)
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return m, err
		}
		if key != "metadata" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return m, err
			}
			continue
		}
		var meta struct{ Metadata objectMeta }
		err = dec.Decode(&meta.Metadata)
		return meta.Metadata, err
	}
	return m, errors.New("no metadata")
}

// ID is the change's deterministic id, the same wherever and however
// often it is exported: of the cluster, the resource, the object's uid,
// the change's resourceVersion and its type. Sinks that drop a message
// they hold under the same id (JetStream's Nats-Msg-Id, a CloudEvent's
// id) so drop a change published again.
//
// A gap's markers and differences have the gap's in their ids too
// (Change.Gap): a listed object is another message than the change that
// made it, which a receiver that drops repeated ids would otherwise drop.
func (c Change) ID(cluster string) string {
	h := sha256.New()
	fields := [...]string{cluster, c.Resource.Group, c.Resource.Version, c.Resource.Resource, c.UID, c.ResourceVersion, string(c.Type)}
	if c.Gap != "" {
		fields[6] += " " + c.Gap
	}
	for _, s := range fields {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// The types of a gap's markers. A gap is a span whose changes are unknown:
// the hub could no longer resume the route (its position was older than
// the hub's history and the API server's compaction), so the route listed
// again. Between a GAP_START and its GAP_END come the differences between
// what the sink's consumers hold and the listing, each marked Resync; the
// GAP_END carries the position after the listing. A consumer that applies
// them holds what the API server held at the GAP_END's resourceVersion.
const (
	GapStart hubclient.EventType = "GAP_START"
	GapEnd   hubclient.EventType = "GAP_END"
)

// IsMarker reports whether c is a gap's marker rather than an object's
// change: it has no object, namespace, name or uid.
func (c Change) IsMarker() bool { return c.Type == GapStart || c.Type == GapEnd }

// ObjectKey names an object of a route.
type ObjectKey struct{ Namespace, Name string }

// Held is the last state of an object that a sink's changes leave its
// consumers holding.
type Held struct {
	UID, ResourceVersion string
	// Identity is the object's apiVersion, kind and metadata name,
	// namespace, uid and resourceVersion as JSON (IdentityOf): the object
	// of the DELETED a gap publishes when the object is gone.
	Identity []byte
}

// Holder is a Sink that can read back what its consumers hold: for each
// object, the last change it holds of it, unless that was a DELETED. At
// a gap the route publishes the differences from it, DELETED included.
// A gap on a sink that is no Holder publishes every listed object as
// ADDED, and its GAP_END has Replaces set: the consumer drops what it
// holds that the gap did not list.
type Holder interface {
	Held(ctx context.Context) (map[ObjectKey]Held, error)
}

// IdentityOf keeps of an object's JSON its apiVersion, kind and metadata
// name, namespace, uid and resourceVersion.
func IdentityOf(object []byte) ([]byte, error) {
	var id struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name            string `json:"name"`
			Namespace       string `json:"namespace,omitempty"`
			UID             string `json:"uid"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(object, &id); err != nil {
		return nil, fmt.Errorf("export: an object's identity: %w", err)
	}
	return json.Marshal(id)
}
