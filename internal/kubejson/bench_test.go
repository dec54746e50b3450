package kubejson_test

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/util/framer"

	. "github.com/informerhub/informerhub/internal/kubejson"
	"github.com/informerhub/informerhub/internal/kubejson/kubejsontest"
)

// watchStream is n MODIFIED events of obj, as the API server writes them.
func watchStream(obj []byte, n int) []byte {
	var b bytes.Buffer
	for range n {
		b.WriteString(`{"type":"MODIFIED","object":`)
		b.Write(obj)
		b.WriteString("}\n")
	}
	return b.Bytes()
}

// benchObjects are a ConfigMap of about 2.4 KB and a pod of about 6 KB with
// managedFields, as the API server serves them.
func benchObjects(b *testing.B) map[string][]byte {
	var pod, cm []byte
	for _, obj := range corpus(b) {
		var hdr Header
		if _, _, err := DecodeObject(obj, &hdr); err != nil {
			b.Fatal(err)
		}
		switch {
		case hdr.Kind == "Pod" && pod == nil:
			pod = obj
		case hdr.Kind == "ConfigMap" && hdr.Name == "bench-configmap":
			cm = obj
		}
	}
	if pod == nil || cm == nil {
		b.Fatal("testdata/apiserver.jsonl lacks the benchmark's pod or ConfigMap")
	}
	return map[string][]byte{"configmap": cm, "pod": pod}
}

// BenchmarkDecodeWatchEvent reads a watch stream of one kind of object, per
// event: with EventReader (one pass), and as client-go's JSON watch
// decoding does (encoding/json framing, the WatchEvent, then the object's
// header, here with encoding/json as the hub did before kubejson).
func BenchmarkDecodeWatchEvent(b *testing.B) {
	const events = 1000
	for name, obj := range benchObjects(b) {
		stream := watchStream(obj, events)
		b.Run(name+"/kubejson", func(b *testing.B) {
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				r := NewEventReader(bytes.NewReader(stream))
				for range events {
					var ev Event
					if err := r.Next(&ev); err != nil {
						b.Fatal(err)
					}
					_ = bytes.Clone(ev.Object) // as the hub keeps it
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
		})
		b.Run(name+"/client-go", func(b *testing.B) {
			// As client-go's REST client decodes JSON watch events.
			scheme := runtime.NewScheme()
			metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
			serializer := jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, scheme, scheme, jsonserializer.SerializerOptions{})
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				frames := framer.NewJSONFramedReader(io.NopCloser(bytes.NewReader(stream)))
				dec := streaming.NewDecoder(frames, serializer)
				for range events {
					var got metav1.WatchEvent
					if _, _, err := dec.Decode(nil, &got); err != nil {
						b.Fatal(err)
					}
					var hdr kubejsontest.Reference
					if err := json.Unmarshal(got.Object.Raw, &hdr); err != nil {
						b.Fatal(err)
					}
					_ = bytes.Clone(got.Object.Raw)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
		})
	}
}

// BenchmarkDecodeEscapes reads a ConfigMap whose 1 MiB value is escapes
// (a certificate bundle's newlines, at worst all of them): one pass, however
// many escapes a string holds.
func BenchmarkDecodeEscapes(b *testing.B) {
	for name, unit := range map[string]string{"every-2-bytes": `\n`, "every-64-bytes": strings.Repeat("x", 62) + `\n`} {
		obj := []byte(`{"kind":"ConfigMap","metadata":{"name":"ca"},"data":{"ca.crt":"` + strings.Repeat(unit, (1<<20)/len(unit)) + `"}}`)
		stream := watchStream(obj, 1)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				r := NewEventReader(&chunks{data: stream, n: 16 << 10})
				var ev Event
				if err := r.Next(&ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
