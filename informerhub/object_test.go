package informerhub

import (
	"testing"
	"unsafe"

	"github.com/informerhub/informerhub/informerhub/upstream"
)

// TestAnObjectSharesTheAPIServersBytes checks that the hub's object of an
// upstream.Object is its JSON as it came, not a copy, with the metadata
// the hub keys by.
func TestAnObjectSharesTheAPIServersBytes(t *testing.T) {
	const data = `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","uid":"u1","resourceVersion":"42","labels":{"app":"web"}}}`
	raw := &upstream.Object{JSON: []byte(data)}
	raw.Name, raw.Namespace, raw.UID, raw.ResourceVersion = "a", "ns", "u1", "42"
	raw.Labels = map[string]string{"app": "web"}
	o, err := newObject(raw)
	if err != nil {
		t.Fatal(err)
	}
	if o.json != data || o.rv != 42 || o.uid != "u1" || o.name != "a" || o.namespace != "ns" || o.labels["app"] != "web" {
		t.Errorf("object %+v", o)
	}
	if unsafe.StringData(o.json) != &raw.JSON[0] {
		t.Error("the object copied the API server's bytes")
	}
	if _, err := newObject(&upstream.Object{}); err == nil {
		t.Error("an object without a resourceVersion was taken")
	}
}
