package upstream

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const configMapJSON = `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","uid":"u1","resourceVersion":"42",` +
	`"labels":{"app":"web"},"annotations":{"big":"x"},"managedFields":[{"manager":"kubectl"}]},"data":{"n":"<&>"}}`

func TestSerializerKeepsTheAPIServersBytes(t *testing.T) {
	obj, _, err := serializer{}.Decode([]byte(configMapJSON), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw := obj.(*Object)
	if string(raw.JSON) != configMapJSON {
		t.Errorf("JSON changed:\n got %s\nwant %s", raw.JSON, configMapJSON)
	}
	want := metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u1", ResourceVersion: "42", Labels: map[string]string{"app": "web"}}
	if diff := cmp.Diff(want, raw.ObjectMeta); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
}

func TestSerializerDecodesStatusErrors(t *testing.T) {
	data := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}`
	obj, _, err := serializer{}.Decode([]byte(data), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	status, ok := obj.(*metav1.Status)
	if !ok {
		t.Fatalf("decoded %T, want *metav1.Status", obj)
	}
	if err := apierrors.FromObject(status); !apierrors.IsResourceExpired(err) {
		t.Fatalf("status is not an expired error: %v", err)
	}
}

func TestSerializerGivesListItemsTheirType(t *testing.T) {
	list := `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":[` +
		`{"metadata":{"name":"a","resourceVersion":"3"},"data":{}},` +
		`{ }]}`
	into := &ObjectList{}
	if _, _, err := (serializer{}).Decode([]byte(list), nil, into); err != nil {
		t.Fatal(err)
	}
	if into.ResourceVersion != "9" || len(into.Items) != 2 {
		t.Fatalf("list %+v", into)
	}
	if got, want := string(into.Items[0].JSON), `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"3"},"data":{}}`; got != want {
		t.Errorf("item 0:\n got %s\nwant %s", got, want)
	}
	if got, want := string(into.Items[1].JSON), `{"kind":"ConfigMap","apiVersion":"v1" }`; got != want {
		t.Errorf("item 1:\n got %s\nwant %s", got, want)
	}

	// Items that have their type (custom resources) are left alone.
	crList := `{"kind":"WidgetList","apiVersion":"x.io/v1","metadata":{},"items":[{"apiVersion":"x.io/v1","kind":"Widget","metadata":{"name":"w"}}]}`
	into = &ObjectList{}
	if _, _, err := (serializer{}).Decode([]byte(crList), nil, into); err != nil {
		t.Fatal(err)
	}
	if got := string(into.Items[0].JSON); got != `{"apiVersion":"x.io/v1","kind":"Widget","metadata":{"name":"w"}}` {
		t.Errorf("custom resource item changed: %s", got)
	}
}

func TestSerializerStripsManagedFields(t *testing.T) {
	obj, _, err := serializer{stripManagedFields: true}.Decode([]byte(configMapJSON), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(obj.(*Object).JSON, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"kind": "ConfigMap", "apiVersion": "v1",
		"metadata": map[string]any{"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "42",
			"labels": map[string]any{"app": "web"}, "annotations": map[string]any{"big": "x"}},
		"data": map[string]any{"n": "<&>"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stripped object (-want +got):\n%s", diff)
	}
}

func TestSerializerReadsTheInitialEventsEndBookmark(t *testing.T) {
	data := `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"7","annotations":{"k8s.io/initial-events-end":"true"}}}`
	obj, _, err := serializer{}.Decode([]byte(data), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if obj.(*Object).Annotations[metav1.InitialEventsAnnotationKey] != "true" {
		t.Fatal("the reflector would not see the end of the initial events")
	}
}

func TestRewriteMetadataKeepsNumbersExact(t *testing.T) {
	in := `{"metadata":{"resourceVersion":"1"},"spec":{"big":9007199254740993,"f":1.5}}`
	out, err := RewriteMetadata([]byte(in), func(m map[string]any) { m["resourceVersion"] = "2" })
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"metadata":{"resourceVersion":"2"},"spec":{"big":9007199254740993,"f":1.5}}`; string(out) != want {
		t.Fatalf("got %s, want %s", out, want)
	}
}
