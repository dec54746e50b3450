package server

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/encoding"
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

// TestSnapshotPagesEncodeAsProtobuf: the codec encodes a Snapshot page in
// buffers it reuses without clearing them (pageBuffers), into exactly the
// bytes protobuf's encoding makes, a smaller page after a larger one
// included; and refuses, as protobuf does, an object that is not UTF-8.
func TestSnapshotPagesEncodeAsProtobuf(t *testing.T) {
	page := func(objects, size int) *informerhubv1.SnapshotResponse {
		resp := &informerhubv1.SnapshotResponse{ResumeToken: "token", ResourceVersion: "42", Last: objects < 500}
		for i := range objects {
			resp.Objects = append(resp.Objects, fmt.Sprintf(`{"i":%d,"v":%q}`, i, strings.Repeat("x", size)))
		}
		if objects > 2 {
			resp.FilterErrors = make([]string, objects)
			resp.FilterErrors[1] = "no such key: v"
		}
		return resp
	}
	c := codec{proto: encoding.GetCodecV2("proto")}
	for _, resp := range []*informerhubv1.SnapshotResponse{page(500, 650), page(300, 100), page(1, 10), page(0, 0), page(500, 650)} {
		want, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Materialize(), want) {
			t.Errorf("a page of %d objects: not protobuf's encoding", len(resp.Objects))
		}
		got.Free() // back to pageBuffers, for the next page
	}
	bad := page(500, 650)
	bad.Objects[7] = "{\"v\":\"\xff\"}"
	if _, err := c.Marshal(bad); err == nil {
		t.Error("a page with an object that is not UTF-8 was encoded")
	}
}
