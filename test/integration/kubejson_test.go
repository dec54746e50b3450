package integration

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/internal/kubejson"
	"github.com/informerhub/informerhub/internal/kubejson/kubejsontest"
)

var updateKubeJSONCorpus = flag.Bool("update-kubejson-corpus", false, "write the objects TestTheIngestDecoderAgreesOnTheAPIServersOutput reads into internal/kubejson/testdata, the fuzz tests' seeds")

// TestTheIngestDecoderAgreesOnTheAPIServersOutput reads the API server's own
// JSON for every resource type it serves (LIST responses, and watch-list
// streams up to their initial-events-end bookmark) with the hub's one-pass
// decoder (internal/kubejson) and with the decoder the API server and
// client-go use, and requires them to agree on every field the hub reads.
// Besides what a fresh cluster holds, it writes objects of unusual shape:
// unicode, escapes (the API server escapes <, > and &), control characters,
// huge and exotic numbers, deep nesting, a custom resource without a schema.
func TestTheIngestDecoderAgreesOnTheAPIServersOutput(t *testing.T) {
	ns := namespace(t)
	const group = "kubejson.informerhub.io"
	createSchemalessCRD(t, group, "oddities", "oddity", "Oddity")
	odd := `{"apiVersion":"` + group + `/v1","kind":"Oddity","metadata":{"name":"odd-1","labels":{"app.kubernetes.io/name":"odd","empty":""},` +
		`"annotations":{"unicode":"café ☕ 𝄞 \u2028\u2029","html":"<a href=\"x\">&amp;</a>","escapes":"\"\\\/\b\f\n\r\t\u0000\u001f","k8s.io/initial-events-end":"false"}},` +
		`"spec":{"huge":123456789012345678901234567890,"maxInt64":9223372036854775807,"negative":-9223372036854775808,"float":-1.5e-300,"exp":1E+2,` +
		`"zero":0,"deep":[[[[[[[[[[{"a":[{}]}]]]]]]]]]],"null":null,"bools":[true,false],"emptyObject":{},"emptyArray":[],` +
		`"keys":{"":"empty key","ключ":"value","a\"b":"quote","a\\b":"backslash"}}}`
	oddities := "/apis/" + group + "/v1/namespaces/" + ns + "/oddities"
	eventually(t, "the API server serves the custom resource", func() bool {
		_, err := kube.CoreV1().RESTClient().Post().AbsPath(oddities).SetHeader("Content-Type", "application/json").Body([]byte(odd)).DoRaw(ctxFor(t))
		return err == nil
	})
	cm := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"odd-cm","annotations":{"a":"\u00e9\u0301 \ud83d\ude00 <>&"}},"data":{"nul":"\u0000","multi":"line\nline","quote":"\"'"}}`
	if _, err := kube.CoreV1().RESTClient().Post().AbsPath("/api/v1/namespaces/"+ns+"/configmaps").SetHeader("Content-Type", "application/json").Body([]byte(cm)).DoRaw(ctxFor(t)); err != nil {
		t.Fatal(err)
	}

	// The objects of kubejson's benchmarks: a ConfigMap of 2 KB of data,
	// and a pod of about 6 KB with its managedFields.
	benchCM := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"bench-configmap","labels":{"app":"bench"}},"data":{"pad":"` + strings.Repeat("x", 2000) + `","sentAt":"0"}}`
	if _, err := kube.CoreV1().RESTClient().Post().AbsPath("/api/v1/namespaces/"+ns+"/configmaps").SetHeader("Content-Type", "application/json").Body([]byte(benchCM)).DoRaw(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	var env []string
	for i := range 40 {
		env = append(env, fmt.Sprintf(`{"name":"SETTING_%02d","value":"value-of-setting-number-%02d"}`, i, i))
	}
	benchPod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"bench-pod","labels":{"app":"bench","tier":"web","pod-template-hash":"5d8f7c9b6"},` +
		`"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-11-24T10:00:00Z"}},"spec":{"nodeName":"node-1","containers":[{"name":"web","image":"registry.example.com/web:1.2.3",` +
		`"ports":[{"containerPort":8080,"name":"http"}],"env":[` + strings.Join(env, ",") + `],"resources":{"requests":{"cpu":"100m","memory":"128Mi"}}}]}}`
	if _, err := kube.CoreV1().RESTClient().Post().AbsPath("/api/v1/namespaces/"+ns+"/pods").SetHeader("Content-Type", "application/json").Body([]byte(benchPod)).DoRaw(ctxFor(t)); err != nil {
		t.Fatal(err)
	}

	lists, err := kube.Discovery().ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	var (
		types, objects, events int
		corpus                 [][]byte
	)
	for _, group := range lists {
		gv, err := schema.ParseGroupVersion(group.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range group.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "watch") {
				continue
			}
			path := "/apis/" + gv.Group + "/" + gv.Version + "/" + r.Name
			if gv.Group == "" {
				path = "/api/" + gv.Version + "/" + r.Name
			}
			types++

			// A LIST response, read whole and item by item.
			body, err := kube.CoreV1().RESTClient().Get().AbsPath(path).DoRaw(ctxFor(t))
			if err != nil {
				t.Fatalf("listing %s: %v", path, err)
			}
			var list kubejson.List
			if err := kubejson.DecodeList(body, &list); err != nil {
				t.Fatalf("%s: the LIST response: %v", path, err)
			}
			var ref struct {
				Kind  string            `json:"kind"`
				Items []json.RawMessage `json:"items"`
			}
			if err := json.Unmarshal(body, &ref); err != nil {
				t.Fatal(err)
			}
			if list.Kind != ref.Kind || len(list.Items) != len(ref.Items) {
				t.Fatalf("%s: kubejson read %q with %d items, encoding/json %q with %d", path, list.Kind, len(list.Items), ref.Kind, len(ref.Items))
			}
			for i, item := range list.Items {
				if !bytes.Equal(item.Data, ref.Items[i]) {
					t.Fatalf("%s: item %d: kubejson %q, encoding/json %q", path, i, item.Data, ref.Items[i])
				}
				kubejsontest.Header(t, item.Data)
				objects++
			}

			// A watch-list stream, up to its initial-events-end bookmark:
			// the events as the API server frames them.
			stream, err := kube.CoreV1().RESTClient().Get().AbsPath(path).
				Param("watch", "true").Param("sendInitialEvents", "true").Param("allowWatchBookmarks", "true").
				Param("resourceVersionMatch", "NotOlderThan").Param("timeoutSeconds", "60").
				Stream(ctxFor(t))
			if err != nil {
				t.Fatalf("watching %s: %v", path, err)
			}
			var raw bytes.Buffer
			reader := kubejson.NewEventReader(io.TeeReader(stream, &raw))
			var got []kubejson.Event
			for {
				var ev kubejson.Event
				if err := reader.Next(&ev); err != nil {
					stream.Close()
					t.Fatalf("%s: event %d: %v", path, len(got), err)
				}
				ev.Object = bytes.Clone(ev.Object)
				got = append(got, ev)
				if ev.Type == "BOOKMARK" && ev.Header.InitialEventsEnd {
					break
				}
			}
			stream.Close()
			frames := json.NewDecoder(&raw)
			for i := range got {
				var frame json.RawMessage
				if err := frames.Decode(&frame); err != nil {
					t.Fatalf("%s: encoding/json framing event %d: %v", path, i, err)
				}
				kubejsontest.Event(t, frame)
				var ref metav1.WatchEvent
				if err := json.Unmarshal(frame, &ref); err != nil {
					t.Fatal(err)
				}
				if got[i].Type != ref.Type || !bytes.Equal(got[i].Object, ref.Object.Raw) {
					t.Fatalf("%s: event %d: kubejson %s %q, encoding/json %s %q", path, i, got[i].Type, got[i].Object, ref.Type, ref.Object.Raw)
				}
				events++
				if got[i].Type == "ADDED" && (i < 3 || got[i].Header.Namespace == ns) {
					corpus = append(corpus, got[i].Object)
				}
			}
		}
	}
	t.Logf("%d resource types: %d listed objects and %d watch events agree", types, objects, events)
	if types < 40 || objects < 100 {
		t.Fatalf("only %d resource types and %d objects: the cluster serves more", types, objects)
	}
	if *updateKubeJSONCorpus {
		file := filepath.Join("..", "..", "internal", "kubejson", "testdata", "apiserver.jsonl")
		if err := os.WriteFile(file, append(bytes.Join(corpus, []byte("\n")), '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
