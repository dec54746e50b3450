package informerhub

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// FuzzRequestValidation feeds arbitrary selectors through the checks every
// Watch and Snapshot request passes: none may panic, and whatever they
// accept must match objects without panicking. The corpus is in
// testdata/fuzz/FuzzRequestValidation.
func FuzzRequestValidation(f *testing.F) {
	f.Add("", "v1", "configmaps", "default", "app=web,tier in (a,b)", "metadata.name=x")
	f.Add("apps", "v1", "deployments", "", "!canary,env notin (prod)", "metadata.namespace!=kube-system")
	f.Add("example.com", "v1beta1", "widgets/status", "ns", "a", "spec.x=y")
	f.Add("..", "..", "../x", "Bad_NS", "a in (", "metadata.name==")
	f.Add("", "v1", "configmaps", "", strings.Repeat("a=b,", 100), strings.Repeat("metadata.name!=x,", 100))
	f.Add("", "v1", "configmaps", strings.Repeat("n", 300), "k="+strings.Repeat("v", 5000), "metadata.name="+strings.Repeat("é", 300))
	f.Add("", "v1", "configmaps", "", "a in (b,c),a notin (d),!e,f,g!=h,i==j", "metadata.namespace=a,metadata.name=b")
	info := ResourceInfo{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespaced: true}
	obj := &object{namespace: "default", name: "x", labels: labels.Set{"app": "web", "tier": "a"}}
	var cfg Config
	cfg.setDefaults()
	f.Fuzz(func(t *testing.T, group, version, resource, namespace, labelSelector, fieldSelector string) {
		s := Selector{
			Resource:      schema.GroupVersionResource{Group: group, Version: version, Resource: resource},
			Namespace:     namespace,
			LabelSelector: labelSelector,
			FieldSelector: fieldSelector,
		}
		_ = validateResource(s)
		sel, err := parseSelector(s, info, &cfg, newFilterCompiler(&cfg))
		if err != nil {
			return
		}
		sel.matches(obj, nil)
		sel.variant(&record{typ: EventModified, obj: obj, prev: obj}, nil)
	})
}

func TestSelectorKeysAreDistinct(t *testing.T) {
	var cfg Config
	cfg.setDefaults()
	filters := newFilterCompiler(&cfg)
	info := ResourceInfo{Resource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespaced: true}
	a, err := parseSelector(Selector{Resource: info.Resource, FieldSelector: "spec.nodeName=v\x01true // ", Filter: "true"}, info, &cfg, filters)
	if err != nil {
		t.Fatal(err)
	}
	b, err := parseSelector(Selector{Resource: info.Resource, FieldSelector: "spec.nodeName=v", Filter: "true // \x01true"}, info, &cfg, filters)
	if err != nil {
		t.Fatal(err)
	}
	if a.key == b.key {
		t.Errorf("two selectors of different objects share the key %q", a.key)
	}
}
