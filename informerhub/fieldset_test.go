package informerhub

import (
	"errors"
	"strings"
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
		spec := BuiltinFields(tt.gvr).spec(tt.field)
		if spec == nil {
			t.Errorf("%s has no field %s", FormatResource(tt.gvr), tt.field)
			continue
		}
		if got := (&object{json: tt.obj}).field(spec); got != tt.want {
			t.Errorf("%s %s of %s = %q, want %q", FormatResource(tt.gvr), tt.field, tt.obj, got, tt.want)
		}
	}
}

func TestCRDFields(t *testing.T) {
	set := CRDFields(false, []string{".spec.color", ".spec.size", ".spec.enabled"})
	if want := "metadata.name, spec.color, spec.enabled, spec.size"; set.describe() != want {
		t.Errorf("fields %q, want %q: a cluster-scoped custom resource has no metadata.namespace", set.describe(), want)
	}
	o := &object{json: `{"spec":{"color":"red","size":3,"enabled":false}}`}
	for field, want := range map[string]string{"spec.color": "red", "spec.size": "3", "spec.enabled": "false"} {
		if got := o.field(set.spec(field)); got != want {
			t.Errorf("%s = %q, want %q", field, got, want)
		}
	}
	if got := (&object{json: `{"spec":{"color":null}}`}).field(set.spec("spec.color")); got != "" {
		t.Errorf("null = %q, want empty", got)
	}
}

func TestParseFieldSelector(t *testing.T) {
	var cfg Config
	cfg.setDefaults()
	info := func(group, version, resource string, namespaced bool) ResourceInfo {
		return ResourceInfo{Resource: schema.GroupVersionResource{Group: group, Version: version, Resource: resource}, Namespaced: namespaced}
	}
	pods, nodes, pvs := info("", "v1", "pods", true), info("", "v1", "nodes", false), info("", "v1", "persistentvolumes", false)
	pcrs := info("certificates.k8s.io", "v1", "podcertificaterequests", true)
	for _, tt := range []struct {
		info   ResourceInfo
		in     string
		want   string // the canonical selector; "" for an error
		reason string // in the error
	}{
		{pods, "spec.host=n1", "spec.nodeName=n1", ""},
		{pods, "spec.nodeName==n1,status.phase!=Failed", "spec.nodeName=n1,status.phase!=Failed", ""},
		{pods, "spec.containers=x", "", `field "spec.containers" is not supported for pods.v1; supported fields: metadata.name, metadata.namespace, spec.hostNetwork, spec.nodeName`},
		{nodes, "metadata.namespace=x", "", "nodes.v1 is cluster-scoped"},
		{nodes, "spec.unschedulable=true", "spec.unschedulable=true", ""},
		// The API server's default accepts it for cluster-scoped types.
		{pvs, "metadata.namespace=", "metadata.namespace=", ""},
		// Its own conversion function does not, namespaced as it is.
		{pcrs, "metadata.namespace=x", "", `field "metadata.namespace" is not supported`},
		{pods, "spec.nodeName in (a)", "", "can't understand"},
	} {
		got, err := parseFieldSelector(tt.in, tt.info, tt.info.fields(), &cfg)
		switch {
		case tt.want != "" && (err != nil || got.String() != tt.want):
			t.Errorf("%s %q = %v, %v; want %q", FormatResource(tt.info.Resource), tt.in, got, err, tt.want)
		case tt.want == "":
			var reqErr *RequestError
			if !errors.As(err, &reqErr) || reqErr.Field != FieldFieldSelector || !strings.Contains(reqErr.Reason, tt.reason) {
				t.Errorf("%s %q: error %v, want one on %s saying %q", FormatResource(tt.info.Resource), tt.in, err, FieldFieldSelector, tt.reason)
			}
		}
	}
}
