package fieldset

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestBuiltinFieldValues checks the values the hub reads for the API
// server's fields on objects that omit them, or hold them in unusual
// places. The integration tests check every field against the API server.
func TestBuiltinFieldValues(t *testing.T) {
	gvr := func(group, version, resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
	}
	tests := []struct {
		gvr   schema.GroupVersionResource
		obj   string
		field string
		want  string
	}{
		{gvr("", "v1", "pods"), `{"spec":{"nodeName":"n1"}}`, "spec.nodeName", "n1"},
		{gvr("", "v1", "pods"), `{"spec":{}}`, "spec.hostNetwork", "false"},
		{gvr("", "v1", "pods"), `{"spec":{"hostNetwork":true}}`, "spec.hostNetwork", "true"},
		{gvr("", "v1", "pods"), `{"spec":{}}`, "spec.restartPolicy", "Always"},
		{gvr("", "v1", "pods"), `{"spec":{"serviceAccount":"legacy"}}`, "spec.serviceAccountName", "legacy"},
		{gvr("", "v1", "pods"), `{"status":{"podIPs":[{"ip":"fd00::1"},{"ip":"10.0.0.2"}]}}`, "status.podIP", "fd00::1"},
		{gvr("", "v1", "pods"), `{"status":{"podIP":"10.0.0.9","podIPs":[{"ip":"10.0.0.2"}]}}`, "status.podIP", "10.0.0.9"},
		{gvr("", "v1", "pods"), `{"status":{"podIPs":[{"ip":"10.0.0.2"}]}}`, "status.podIPs", ""},
		{gvr("", "v1", "events"), `{"reportingComponent":"ctrl"}`, "source", "ctrl"},
		{gvr("", "v1", "events"), `{"source":{"component":"kubelet"},"reportingComponent":"ctrl"}`, "source", "kubelet"},
		{gvr("events.k8s.io", "v1", "events"), `{"regarding":{"kind":"Pod"}}`, "regarding.kind", "Pod"},
		{gvr("", "v1", "secrets"), `{}`, "type", "Opaque"},
		{gvr("", "v1", "services"), `{"spec":{}}`, "spec.type", "ClusterIP"},
		{gvr("", "v1", "namespaces"), `{}`, "status.phase", "Active"},
		{gvr("", "v1", "nodes"), `{"spec":{"unschedulable":true}}`, "spec.unschedulable", "true"},
		{gvr("", "v1", "replicationcontrollers"), `{"status":{}}`, "status.replicas", "0"},
		{gvr("batch", "v1", "jobs"), `{"status":{"succeeded":3}}`, "status.successful", "3"},
		{gvr("resource.k8s.io", "v1", "resourceslices"), `{"spec":{"pool":{"name":"p"}}}`, "spec.pool.name", "p"},
		{gvr("resource.k8s.io", "v1", "resourceslices"), `{"spec":{"nodeName":null}}`, "spec.nodeName", ""},
	}
	for _, tt := range tests {
		spec := Builtin(tt.gvr).Spec(tt.field)
		if spec == nil {
			t.Errorf("%s has no field %s", tt.gvr, tt.field)
			continue
		}
		if got := spec.Value([]byte(tt.obj)); got != tt.want {
			t.Errorf("%s %s of %s = %q, want %q", tt.gvr, tt.field, tt.obj, got, tt.want)
		}
	}
}

func TestCRDFields(t *testing.T) {
	set := ForCRD(false, []string{".spec.color", ".spec.size", ".spec.enabled"})
	if want := "metadata.name, spec.color, spec.enabled, spec.size"; set.Describe() != want {
		t.Errorf("fields %q, want %q: a cluster-scoped custom resource has no metadata.namespace", set.Describe(), want)
	}
	obj := []byte(`{"metadata":{"name":"n"},"spec":{"color":"red","size":3,"enabled":false}}`)
	for field, want := range map[string]string{"metadata.name": "n", "spec.color": "red", "spec.size": "3", "spec.enabled": "false"} {
		if got := set.Spec(field).Value(obj); got != want {
			t.Errorf("%s = %q, want %q", field, got, want)
		}
	}
	if got := set.Spec("spec.color").Value([]byte(`{"spec":{"color":null}}`)); got != "" {
		t.Errorf("null = %q, want empty", got)
	}
}

func TestAliasesNameTheirField(t *testing.T) {
	pods := Builtin(schema.GroupVersionResource{Version: "v1", Resource: "pods"})
	if name, ok := pods.Canonical("spec.host"); !ok || name != "spec.nodeName" {
		t.Errorf("spec.host is %q (%v), want spec.nodeName", name, ok)
	}
	if _, ok := pods.Canonical("spec.containers"); ok {
		t.Error("pods have a field spec.containers")
	}
}
