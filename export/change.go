package export

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
}

// changeOf makes the change of a watch event of resource; ok is false for
// events that change nothing (bookmarks).
func changeOf(resource schema.GroupVersionResource, e hubclient.Event) (c Change, ok bool, err error) {
	switch e.Type {
	case hubclient.Added, hubclient.Modified, hubclient.Deleted:
	default:
		return Change{}, false, nil
	}
	var meta struct {
		Metadata struct {
			Namespace, Name, UID, ResourceVersion string
		}
	}
	if err := json.Unmarshal(e.Object, &meta); err != nil {
		return Change{}, false, fmt.Errorf("export: a %s event's object: %w", e.Type, err)
	}
	m := meta.Metadata
	return Change{Type: e.Type, Resource: resource, Namespace: m.Namespace, Name: m.Name, UID: m.UID,
		ResourceVersion: m.ResourceVersion, Object: e.Object, ResumeToken: e.ResumeToken,
		FromRelist: e.FromRelist, Resync: e.Resync}, true, nil
}

// ID is the change's deterministic id, the same wherever and however
// often it is exported: of the cluster, the resource, the object's uid,
// the change's resourceVersion and its type. Sinks that drop a message
// they hold under the same id (JetStream's Nats-Msg-Id, a CloudEvent's
// id) so drop a change published again.
func (c Change) ID(cluster string) string {
	h := sha256.New()
	for _, s := range [...]string{cluster, c.Resource.Group, c.Resource.Version, c.Resource.Resource, c.UID, c.ResourceVersion, string(c.Type)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
