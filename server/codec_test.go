package server

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
)

func nested(depth int) string {
	return `{"kind":"X","metadata":{"name":"deep"},"spec":` + strings.Repeat(`{"a":`, depth) + `1` + strings.Repeat(`}`, depth) + `}`
}

// clientRecursionLimit is the message nesting the most restrictive
// protobuf decoders accept by default (see maxStructDepth).
const clientRecursionLimit = 100

// TestStructsFallBackToJSONWhenTooDeep checks that an object a protobuf
// decoder could refuse as a Struct is sent as JSON, in a Watch and in a
// Snapshot page alike, and that every other object is sent as a Struct a
// decoder accepts.
func TestStructsFallBackToJSONWhenTooDeep(t *testing.T) {
	shallow, deep := nested(maxStructDepth-1), nested(maxStructDepth)
	if d := jsonDepth(shallow); d != maxStructDepth {
		t.Fatalf("the shallow object nests %d levels, want %d", d, maxStructDepth)
	}
	if d := jsonDepth(deep); d <= maxStructDepth {
		t.Fatalf("the deep object nests %d levels", d)
	}
	if d := jsonDepth(`{"a":"}}}{{{[[\"{"}`); d != 1 {
		t.Errorf("brackets in strings counted: depth %d, want 1", d)
	}

	resp := watchResponse(&informerhub.Event{Type: informerhub.EventModified, Object: shallow, PreviousObject: shallow, Encoding: encodingStruct})
	if resp.ObjectStruct == nil || resp.PreviousObjectStruct == nil || resp.Object != "" {
		t.Fatalf("an object of depth %d: %v", maxStructDepth, resp)
	}
	data, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	// As the C++, Java, Python and JavaScript decoders would.
	strict := proto.UnmarshalOptions{RecursionLimit: clientRecursionLimit}
	if err := strict.Unmarshal(data, &informerhubv1.WatchResponse{}); err != nil {
		t.Fatalf("a client cannot decode it: %v", err)
	}
	resp = watchResponse(&informerhub.Event{Type: informerhub.EventModified, Object: deep, PreviousObject: shallow, Encoding: encodingStruct})
	if resp.ObjectStruct != nil || resp.Object != deep || resp.PreviousObject != shallow {
		t.Fatalf("an object too deep for a Struct is not sent as JSON, with its previous state: %v", protojson.Format(resp))
	}

	if structs := structsOf([]string{shallow, shallow}); len(structs) != 2 {
		t.Errorf("a page of shallow objects: %d Structs", len(structs))
	}
	if structs := structsOf([]string{shallow, deep}); structs != nil {
		t.Errorf("a page with an object too deep: %d Structs, want the page as JSON", len(structs))
	}
}
