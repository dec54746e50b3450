package kubejson_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sigsjson "sigs.k8s.io/json"

	"github.com/informerhub/informerhub/internal/jsonscan"
	. "github.com/informerhub/informerhub/internal/kubejson"
	"github.com/informerhub/informerhub/internal/kubejson/kubejsontest"
)

// seeds are unusual but valid shapes, and malformed ones.
var seeds = []string{
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","uid":"u","resourceVersion":"12","labels":{"app":"web"}},"data":{"k":"v"}}`,
	`{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"caf\u00e9-\u2028","labels":{},"annotations":{"k8s.io/initial-events-end":"true"}},"spec":{"big":123456789012345678901234567890,"small":-1.5e-300,"deep":[[[{"a":[]}]]],"esc":"\"\\\/\b\f\n\r\t\ud83d\ude00 \ud800"}}`,
	`{"metadata":{"name":null,"labels":null,"annotations":null,"resourceVersion":"1"},"metadata":{"namespace":"b","labels":{"x":null}}}`,
	`{"metadata":{"labels":{"a":"1"}},"metadata":{"labels":{"b":"2"}}}`,
	`{"metadata":{"annotations":{"k8s.io/initial-events-end":"true"}},"metadata":{"annotations":{"other":"x"}}}`,
	`{"Kind":"upper","METADATA":{"Name":"x"},"ki\u006ed":"escaped-key"}`,
	` { "kind" : "Spaced" , "metadata" : { "name" : "n" } } `,
	`{"metadata":{"managedFields":[{"manager":"kubectl","fieldsV1":{"f:data":{}}}],"name":"m"}}`,
	"{\"metadata\":{\"name\":\"\xff\xfe invalid utf-8\"}}",
	`null`,
	`{}`,
	`{"kind":5}`,
	`{"metadata":[]}`,
	`{"metadata":{"labels":{"a":1}}}`,
	`{"metadata":{"annotations":{"k8s.io/initial-events-end":true}}}`,
	`{"metadata":{"name":"x"}`,
	`{"metadata":{"name":"x"}}}`,
	`{"a":01}`,
	`{"a":1.}`,
	`{"a":-}`,
	`{"a":tru}`,
	`{"a":"\x"}`,
	"{\"a\":\"tab\there\"}",
	`[1,2]`,
	`"string"`,
	`{"a":1,}`,
	`{,}`,
}

func FuzzDecodeHeader(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	for _, obj := range corpus(f) {
		f.Add(obj)
	}
	f.Fuzz(func(t *testing.T, data []byte) { kubejsontest.Header(t, data) })
}

func FuzzDecodeEvent(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(`{"type":"MODIFIED","object":` + s + `}`))
	}
	f.Add([]byte(`{"object":{"metadata":{"name":"first"}},"type":"ADDED","object":{"kind":"Second"}}`))
	f.Add([]byte(`{"type":"ADDED","object":{"metadata":{"name":"kept"}},"object":null}`))
	f.Add([]byte(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","code":410,"reason":"Expired"}}`))
	f.Add([]byte(`{"type":"BOOKMARK"}`))
	f.Add([]byte(`{"type":"ADDED","object":{"metadata":{"name":1}},"object":{"kind":"Y"}}`))
	f.Add([]byte(`{"type":"ADDED","object":{"metadata":{"name":"x"}},"object":5}`))
	for _, obj := range corpus(f) {
		f.Add([]byte(`{"type":"ADDED","object":` + string(obj) + `}`))
	}
	f.Fuzz(func(t *testing.T, data []byte) { kubejsontest.Event(t, data) })
}

// corpus is the API server's own output kept in testdata/apiserver: one
// object per line.
func corpus(t testing.TB) [][]byte {
	data, err := os.ReadFile(filepath.Join("testdata", "apiserver.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) > 0 {
			out = append(out, line)
		}
	}
	return out
}

func TestDecodeListAgreesWithEncodingJSON(t *testing.T) {
	objects := corpus(t)
	list := []byte(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"abc"},"items":[` + string(bytes.Join(objects, []byte(","))) + `]}`)
	var l List
	if err := DecodeList(list, &l); err != nil {
		t.Fatal(err)
	}
	if l.Kind != "ConfigMapList" || l.APIVersion != "v1" || len(l.Metadata) != 1 || string(l.Metadata[0]) != `{"resourceVersion":"42","continue":"abc"}` || len(l.Items) != len(objects) {
		t.Fatalf("list: %q %q %q, %d items", l.Kind, l.APIVersion, l.Metadata, len(l.Items))
	}
	for i, item := range l.Items {
		if !bytes.Equal(item.Data, objects[i]) {
			t.Fatalf("item %d: %q", i, item.Data)
		}
		var ref kubejsontest.Reference
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(item.Data, &ref); err != nil {
			t.Fatal(err)
		}
		kubejsontest.Same(t, &item.Header, &ref, item.Data)
	}
	for _, bad := range []string{`{"items":{}}`, `{"items":{},"items":[]}`, `{"items":[1]}`, `{"items":[{}],}`, `{"items":[{}]} x`, `{"items":[` + nested(jsonscan.MaxDepth-1) + `]}`} {
		if err := DecodeList([]byte(bad), &l); err == nil {
			t.Errorf("DecodeList(%.60s) succeeded", bad)
		}
	}
	// As the hub decoded lists before: items are raw JSON first, and only
	// those that stand are read.
	if err := DecodeList([]byte(`{"items":[{"metadata":{"name":1}}],"items":[{"metadata":{"name":"b"}}],"metadata":{"resourceVersion":"5"},"metadata":{"continue":"x"}}`), &l); err != nil ||
		len(l.Items) != 1 || l.Items[0].Header.Name != "b" || len(l.Metadata) != 2 {
		t.Errorf("duplicate members: %v, %+v", err, l)
	}
}

// nested is n arrays, one inside the other, around 1.
func nested(n int) string {
	return strings.Repeat("[", n) + "1" + strings.Repeat("]", n)
}

func TestDepthCountsTheWholeDocument(t *testing.T) {
	for _, depth := range []int{jsonscan.MaxDepth - 2, jsonscan.MaxDepth - 1, jsonscan.MaxDepth} {
		// The spec's value is inside one object already.
		kubejsontest.Header(t, []byte(`{"spec":`+nested(depth)+`}`))
		kubejsontest.Header(t, []byte(`{"spec":`+strings.Repeat("[", depth)+"[]"+strings.Repeat("]", depth)+`}`))
		kubejsontest.Event(t, []byte(`{"type":"ADDED","object":{"spec":`+nested(depth-1)+`}}`))
	}
}

// chunks reads data n bytes at a time.
type chunks struct {
	data []byte
	n    int
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.data)
	c.data = c.data[n:]
	return n, nil
}

func TestEventReaderReadsEventsThatArriveInPieces(t *testing.T) {
	var stream bytes.Buffer
	var want [][]byte
	for i, obj := range corpus(t) {
		want = append(want, obj)
		// As the API server writes them, and with space between.
		stream.WriteString(`{"type":"ADDED","object":`)
		stream.Write(obj)
		stream.WriteString("}\n")
		if i%3 == 0 {
			stream.WriteString(" \r\n\t")
		}
	}
	big := `{"kind":"Big","metadata":{"name":"big"},"data":"` + strings.Repeat(`\"x`, 200<<10) + `"}`
	stream.WriteString(`{"type":"MODIFIED","object":` + big + "}\n")
	want = append(want, []byte(big))
	for _, n := range []int{1, 7, 100, 4096, 70 << 10, 1 << 30} {
		r := NewEventReader(&chunks{data: stream.Bytes(), n: n})
		for i, w := range want {
			var ev Event
			if err := r.Next(&ev); err != nil {
				t.Fatalf("reads of %d bytes: event %d: %v", n, i, err)
			}
			if !bytes.Equal(ev.Object, w) {
				t.Fatalf("reads of %d bytes: event %d: %.80q, want %.80q", n, i, ev.Object, w)
			}
			var ref kubejsontest.Reference
			if err := sigsjson.UnmarshalCaseSensitivePreserveInts(w, &ref); err != nil {
				t.Fatal(err)
			}
			kubejsontest.Same(t, &ev.Header, &ref, w)
		}
		var ev Event
		if err := r.Next(&ev); err != io.EOF {
			t.Fatalf("reads of %d bytes: at the end: %v, want io.EOF", n, err)
		}
	}
}

// FuzzEventReaderInPieces reads a stream whole and in reads of a few bytes,
// which must give the same events, or fail alike.
func FuzzEventReaderInPieces(f *testing.F) {
	for _, obj := range corpus(f)[:5] {
		f.Add([]byte(`{"type":"ADDED","object":`+string(obj)+"}\n"+`{"type":"DELETED","object":{"metadata":{"name":"x\"}"}}}`), uint8(7))
	}
	f.Add([]byte(`{"type":"ADDED","object":{"a":"\u00e9\\\""}} {"type":"BOOKMARK","object":{}}`), uint8(1))
	f.Fuzz(func(t *testing.T, stream []byte, piece uint8) {
		whole, wholeErr := readAll(NewEventReader(bytes.NewReader(stream)))
		pieces, piecesErr := readAll(NewEventReader(&chunks{data: stream, n: int(piece%17) + 1}))
		if (wholeErr == nil) != (piecesErr == nil) || len(whole) != len(pieces) {
			t.Fatalf("whole: %d events, %v; in pieces of %d: %d events, %v", len(whole), wholeErr, piece%17+1, len(pieces), piecesErr)
		}
		for i := range whole {
			if whole[i].Type != pieces[i].Type || !bytes.Equal(whole[i].Object, pieces[i].Object) || whole[i].Header.Name != pieces[i].Header.Name {
				t.Fatalf("event %d: whole %q %q, in pieces %q %q", i, whole[i].Type, whole[i].Object, pieces[i].Type, pieces[i].Object)
			}
		}
	})
}

// readAll reads events until the stream ends (io.EOF, which is no error)
// or fails.
func readAll(r *EventReader) ([]Event, error) {
	var out []Event
	for {
		var ev Event
		switch err := r.Next(&ev); err {
		case nil:
			ev.Object = bytes.Clone(ev.Object)
			out = append(out, ev)
		case io.EOF:
			return out, nil
		default:
			return out, err
		}
	}
}

func TestEventReaderEnds(t *testing.T) {
	for _, tt := range []struct {
		stream string
		want   error
	}{
		{``, io.EOF},
		{" \n", io.EOF},
		{`{"type":"ADDED","object":{"kind":"X"`, io.ErrUnexpectedEOF},
		{`{"type":"ADDED","object":{"kind":"X"}}{"type":`, io.ErrUnexpectedEOF},
		{"null\nnull", io.EOF}, // empty events, which the hub's watch decoder refuses
		{"nul", io.ErrUnexpectedEOF},
	} {
		r := NewEventReader(&chunks{data: []byte(tt.stream), n: 5})
		var err error
		for err == nil {
			var ev Event
			err = r.Next(&ev)
		}
		if err != tt.want {
			t.Errorf("%q: %v, want %v", tt.stream, err, tt.want)
		}
	}
	// A malformed event fails, whether it arrives whole or in pieces.
	for _, n := range []int{3, 1 << 20} {
		r := NewEventReader(&chunks{data: []byte(`{"type":"ADDED","object":{"kind":01}}` + "\n"), n: n})
		var ev Event
		if err := r.Next(&ev); err == nil || err == io.EOF || err == io.ErrUnexpectedEOF {
			t.Errorf("reads of %d: a malformed event: %v", n, err)
		}
	}
}

func TestWithoutManagedFieldsKeepsTheRestAsItWas(t *testing.T) {
	for in, want := range map[string]string{
		`{"kind":"X","metadata":{"name":"a","managedFields":[{"m":"]}"}],"labels":{"x":"y"}},"data":{}}`: `{"kind":"X","metadata":{"name":"a","labels":{"x":"y"}},"data":{}}`,
		`{"metadata":{"managedFields":[],"name":"a"}}`:                                                   `{"metadata":{"name":"a"}}`,
		`{"metadata":{"name":"a","managedFields":null}}`:                                                 `{"metadata":{"name":"a"}}`,
		`{"metadata":{"managedFields":[]},"spec":{"metadata":{"managedFields":1}}}`:                      `{"metadata":{},"spec":{"metadata":{"managedFields":1}}}`,
		`{"metadata": { "name" : "a" , "managedFields" : [] } }`:                                         `{"metadata": {"name" : "a"} }`,
	} {
		var hdr Header
		if _, _, err := DecodeObject([]byte(in), &hdr); err != nil {
			t.Fatal(err)
		}
		out, ok, err := WithoutManagedFields([]byte(in), &hdr)
		if err != nil || !ok || string(out) != want {
			t.Errorf("WithoutManagedFields(%s) = %s, %v, %v; want %s", in, out, ok, err, want)
		}
		if cap(out) > len(out)+1 {
			t.Errorf("WithoutManagedFields(%s) holds %d bytes for %d", in, cap(out), len(out))
		}
	}
	var hdr Header
	twice := []byte(`{"metadata":{"managedFields":[]},"metadata":{"name":"a"}}`)
	if _, _, err := DecodeObject(twice, &hdr); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := WithoutManagedFields(twice, &hdr); ok || err != nil {
		t.Errorf("two metadata members: ok %v, %v; want the caller to merge them", ok, err)
	}
}
