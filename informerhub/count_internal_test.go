package informerhub

import "testing"

// TestGroupReadsWhatDecodingReads: the group values read in place from an
// object's JSON are those of the object decoded, for every kind of value
// and path.
func TestGroupReadsWhatDecodingReads(t *testing.T) {
	objects := []string{
		`{"kind":"Pod","metadata":{"name":"a","namespace":"ns","labels":{"app":"web","n":"1"},"managedFields":[{"x":1}]},"status":{"phase":"Running","n":12345678901234567890,"ok":true,"none":null,"obj":{"b":1,"a":[1,2]},"list":[{"v":"x"},{"w":1},{"v":2}]}}`,
		`{ "metadata" : { "labels" : { "app" : "we\"b\u00e9" } } , "status" : { "phase" : "" } }`,
		`{"metadata":{"labels":null},"status":"scalar"}`,
		`{"metadata":{}}`,
		`{}`,
	}
	for _, groupBy := range []string{"", "namespace", "label:app", "label:n", "label:missing", "status.phase", "status.n", "status.ok", "status.none",
		"status.obj", "status.obj.a", "status.list.v", "status.phase.deeper", "metadata.name", `["namespace"]`} {
		g, err := parseGroupBy(groupBy)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objects {
			got, errGot := g.group(obj)
			want, errWant := g.decoded(obj)
			if g.path == nil {
				want, errWant = "", nil
			}
			if got != want || (errGot == nil) != (errWant == nil) {
				t.Errorf("group_by %q of %s: %q (%v), decoded %q (%v)", groupBy, obj, got, errGot, want, errWant)
			}
		}
	}
}
