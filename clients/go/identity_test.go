package hubclient

import (
	"encoding/json"
	"testing"
)

// identityOf reads what json.Unmarshal of the whole object reads, from
// objects as the API server writes them and from odd ones, and refuses
// what is not an object.
func TestIdentityOfReadsTheMetadataAsUnmarshal(t *testing.T) {
	for _, object := range []string{
		`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","uid":"u1","resourceVersion":"7","labels":{"x":"y"}},"data":{"k":"v"}}`,
		`{"metadata":{"name":"b","uid":"u2","resourceVersion":"8"},"spec":{"nested":{"metadata":{"name":"not this"}}}}`,
		`{"spec":[1,2,{"metadata":{"name":"not this"}}],"metadata":{"name":"c","namespace":"ns","uid":"u3","resourceVersion":"9"}}`,
		`{"kind":"Node","metadata":{"name":"cluster-scoped","uid":"u4","resourceVersion":"10","annotations":{"a":"{\"metadata\":1}"}}}`,
		`{"kind":"Empty"}`,
		`{}`,
	} {
		var want identity
		if err := json.Unmarshal([]byte(object), &want); err != nil {
			t.Fatalf("%s: %v", object, err)
		}
		got, err := identityOf([]byte(object))
		if err != nil || got != want {
			t.Errorf("%s: identityOf = %+v, %v; json.Unmarshal read %+v", object, got, err, want)
		}
	}
	for _, bad := range []string{``, `[]`, `"metadata"`, `{"metadata":`, `{"metadata":{"name":1}}`, `{"a":}`} {
		if got, err := identityOf([]byte(bad)); err == nil {
			t.Errorf("%q: identityOf = %+v, no error", bad, got)
		}
	}
}

// BenchmarkIdentityOf reads the identity of a ConfigMap of 2 KiB of data,
// against json.Unmarshal of the whole object.
func BenchmarkIdentityOf(b *testing.B) {
	data := make([]byte, 2048)
	for i := range data {
		data[i] = 'a' + byte(i%26)
	}
	// In the API server's order: kind, apiVersion, metadata, then the rest.
	object := []byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","uid":"u1","resourceVersion":"7"},"data":{"k":"` + string(data) + `"}}`)
	b.Run("metadata", func(b *testing.B) {
		for b.Loop() {
			if _, err := identityOf(object); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("whole-object", func(b *testing.B) {
		for b.Loop() {
			var id identity
			if err := json.Unmarshal(object, &id); err != nil {
				b.Fatal(err)
			}
		}
	})
}
