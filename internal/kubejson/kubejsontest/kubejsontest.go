// Package kubejsontest checks package kubejson against the decoder the API
// server uses (encoding/json, matching keys case-sensitively:
// sigs.k8s.io/json), for its fuzz tests and for the integration suite,
// which runs it on the API server's own output.
package kubejsontest

import (
	"bytes"
	"errors"
	"maps"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"

	"github.com/informerhub/informerhub/internal/kubejson"
)

// Reference is what the API server's decoder (encoding/json, matching
// keys case-sensitively: sigs.k8s.io/json) reads of the fields a Header
// holds.
type Reference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name            string            `json:"name"`
		Namespace       string            `json:"namespace"`
		UID             string            `json:"uid"`
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]string `json:"labels"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// Header decodes data, one object, with DecodeObject and with the
// reference decoder, and fails t unless they agree: both fail, or both read
// the same fields.
func Header(t testing.TB, data []byte) {
	t.Helper()
	var ref Reference
	refErr := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &ref)
	var hdr kubejson.Header
	_, _, err := kubejson.DecodeObject(data, &hdr)
	if (err == nil) != (refErr == nil) {
		t.Fatalf("kubejson: %v; encoding/json: %v\non %q", err, refErr, data)
	}
	if err != nil {
		return
	}
	Same(t, &hdr, &ref, data)
}

// Same fails t unless hdr holds what ref does; data is what both read.
func Same(t testing.TB, hdr *kubejson.Header, ref *Reference, data []byte) {
	t.Helper()
	got := []string{hdr.APIVersion, hdr.Kind, hdr.Name, hdr.Namespace, hdr.UID, hdr.ResourceVersion}
	want := []string{ref.APIVersion, ref.Kind, ref.Metadata.Name, ref.Metadata.Namespace, ref.Metadata.UID, ref.Metadata.ResourceVersion}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("field %d: kubejson %q, encoding/json %q\non %q", i, got[i], want[i], data)
		}
	}
	if !maps.Equal(hdr.Labels, ref.Metadata.Labels) || (hdr.Labels == nil) != (ref.Metadata.Labels == nil) {
		t.Fatalf("labels: kubejson %v, encoding/json %v\non %q", hdr.Labels, ref.Metadata.Labels, data)
	}
	if want := ref.Metadata.Annotations[kubejson.InitialEventsEndAnnotation] == "true"; hdr.InitialEventsEnd != want {
		t.Fatalf("initial-events-end: kubejson %v, encoding/json %v\non %q", hdr.InitialEventsEnd, want, data)
	}
}

// Event decodes data, one watch event, with DecodeEvent and with the
// reference decoder, and fails t unless they agree.
func Event(t testing.TB, data []byte) {
	t.Helper()
	// What client-go's JSON watch decoding reads: a metav1.WatchEvent, its
	// object kept as JSON in a RawExtension, then the object.
	var ref metav1.WatchEvent
	refErr := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &ref)
	var refHdr Reference
	if refErr == nil && ref.Object.Raw != nil {
		refErr = sigsjson.UnmarshalCaseSensitivePreserveInts(ref.Object.Raw, &refHdr)
	}
	var ev kubejson.Event
	n, err := kubejson.DecodeEvent(data, &ev)
	if err == nil && len(bytes.TrimLeft(data[n:], " \t\r\n")) > 0 {
		err = errors.New("data after the event")
	}
	if (err == nil) != (refErr == nil) {
		t.Fatalf("kubejson: %v; encoding/json: %v\non %q", err, refErr, data)
	}
	if err != nil {
		return
	}
	if ev.Type != ref.Type {
		t.Fatalf("type: kubejson %q, encoding/json %q", ev.Type, ref.Type)
	}
	if !bytes.Equal(ev.Object, ref.Object.Raw) {
		t.Fatalf("object: kubejson %q, encoding/json %q", ev.Object, ref.Object.Raw)
	}
	Same(t, &ev.Header, &refHdr, data)
}
