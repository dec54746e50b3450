package state

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
	o, err := NewObject(raw)
	if err != nil {
		t.Fatal(err)
	}
	if o.JSON != data || o.RV != 42 || o.UID != "u1" || o.Name != "a" || o.Namespace != "ns" || o.Labels["app"] != "web" {
		t.Errorf("object %+v", o)
	}
	if unsafe.StringData(o.JSON) != &raw.JSON[0] {
		t.Error("the object copied the API server's bytes")
	}
	if _, err := NewObject(&upstream.Object{}); err == nil {
		t.Error("an object without a resourceVersion was taken")
	}
}

// TestAnObjectCachesAFewVerdicts: an object keeps the verdicts of at most
// MaxCachedVerdicts filters, dropping the oldest first.
func TestAnObjectCachesAFewVerdicts(t *testing.T) {
	o := &Object{}
	for id := range uint64(MaxCachedVerdicts + 1) {
		o.CacheVerdict(id, Verdict{Match: id%2 == 0})
	}
	if _, ok := o.CachedVerdict(0); ok {
		t.Error("the oldest verdict is still cached past MaxCachedVerdicts")
	}
	for id := range uint64(MaxCachedVerdicts + 1) {
		if v, ok := o.CachedVerdict(id); id > 0 && (!ok || v.Match != (id%2 == 0)) {
			t.Errorf("verdict %d: %+v, cached %v", id, v, ok)
		}
	}
	if n := len(*o.verdicts.Load()); n != MaxCachedVerdicts {
		t.Errorf("the object caches %d verdicts, want %d", n, MaxCachedVerdicts)
	}
}
