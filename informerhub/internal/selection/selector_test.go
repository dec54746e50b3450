package selection

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub/celfilter"
	"github.com/informerhub/informerhub/informerhub/internal/errs"
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/state"
	"github.com/informerhub/informerhub/informerhub/upstream"
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
	info := upstream.ResourceInfo{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespaced: true}
	obj := &state.Object{Namespace: "default", Name: "x", Labels: labels.Set{"app": "web", "tier": "a"}}
	f.Fuzz(func(t *testing.T, group, version, resource, namespace, labelSelector, fieldSelector string) {
		s := Spec{
			Resource:      schema.GroupVersionResource{Group: group, Version: version, Resource: resource},
			Namespace:     namespace,
			LabelSelector: labelSelector,
			FieldSelector: fieldSelector,
		}
		_ = ValidateResource(s)
		sel, err := Parse(s, info, &testLimits, testCompiler())
		if err != nil {
			return
		}
		sel.Matches(obj, nil)
		sel.Variant(&state.Record{Type: event.Modified, Object: obj, Previous: obj}, nil)
	})
}

func TestSelectorKeysAreDistinct(t *testing.T) {
	filters := testCompiler()
	info := upstream.ResourceInfo{Resource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespaced: true}
	a, err := Parse(Spec{Resource: info.Resource, FieldSelector: "spec.nodeName=v\x01true // ", Filter: "true"}, info, &testLimits, filters)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse(Spec{Resource: info.Resource, FieldSelector: "spec.nodeName=v", Filter: "true // \x01true"}, info, &testLimits, filters)
	if err != nil {
		t.Fatal(err)
	}
	if a.key == b.key {
		t.Errorf("two selectors of different objects share the key %q", a.key)
	}
}

func TestParseFieldSelector(t *testing.T) {
	info := func(group, version, resource string, namespaced bool) upstream.ResourceInfo {
		return upstream.ResourceInfo{Resource: schema.GroupVersionResource{Group: group, Version: version, Resource: resource}, Namespaced: namespaced}
	}
	pods, nodes, pvs := info("", "v1", "pods", true), info("", "v1", "nodes", false), info("", "v1", "persistentvolumes", false)
	pcrs := info("certificates.k8s.io", "v1", "podcertificaterequests", true)
	for _, tt := range []struct {
		info   upstream.ResourceInfo
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
		got, err := ParseFieldSelector(tt.in, tt.info, tt.info.FieldSet(), &testLimits)
		switch {
		case tt.want != "" && (err != nil || got.String() != tt.want):
			t.Errorf("%s %q = %v, %v; want %q", upstream.FormatResource(tt.info.Resource), tt.in, got, err, tt.want)
		case tt.want == "":
			var reqErr *errs.RequestError
			if !errors.As(err, &reqErr) || reqErr.Field != errs.FieldFieldSelector || !strings.Contains(reqErr.Reason, tt.reason) {
				t.Errorf("%s %q: error %v, want one on %s saying %q", upstream.FormatResource(tt.info.Resource), tt.in, err, errs.FieldFieldSelector, tt.reason)
			}
		}
	}
}

// TestTruncateKeepsCharactersWhole checks that a shortened reason stays
// valid UTF-8, which a gRPC status message must be.
func TestTruncateKeepsCharactersWhole(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc..."},
		{"ab€cd", 3, "ab..."}, // € is three bytes: not cut through
		{"ab€cd", 5, "ab€..."},
		{"€€", 1, "..."},
	} {
		got := TruncateTo(tc.in, tc.max)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("truncateTo(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}

// TestShardSelectorsPartitionObjects: four shards over uid, and four over
// namespace, select each object exactly once, as selectors of distinct
// keys; a bad shard selector names its field.
func TestShardSelectorsPartitionObjects(t *testing.T) {
	filters := testCompiler()
	info := upstream.ResourceInfo{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespaced: true}
	bounds := []string{"0x0000000000000000", "0x4000000000000000", "0x8000000000000000", "0xc000000000000000", "0x10000000000000000"}
	for _, key := range []string{"object.metadata.uid", "object.metadata.namespace"} {
		var shards []*Selector
		keys := map[string]bool{}
		for i := range 4 {
			sel, err := Parse(Spec{Resource: info.Resource,
				ShardSelector: "shardRange(" + key + ", '" + bounds[i] + "', '" + bounds[i+1] + "')"}, info, &testLimits, filters)
			if err != nil {
				t.Fatal(err)
			}
			shards = append(shards, sel)
			keys[sel.key] = true
		}
		if len(keys) != 4 {
			t.Fatalf("%s: 4 shards share keys: %v", key, keys)
		}
		for i := range 1000 {
			o := &state.Object{Namespace: "ns-" + strconv.Itoa(i%37), Name: "x", UID: "uid-" + strconv.Itoa(i)}
			n := 0
			for _, s := range shards {
				if s.Matches(o, nil).Match {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%s: object %d is in %d shards", key, i, n)
			}
		}
	}
	for _, bad := range []string{
		"shardRange(object.metadata.name, '0x0', '0x1')",
		"shardRange(object.metadata.uid, '0x2', '0x1')",
		"true",
	} {
		_, err := Parse(Spec{Resource: info.Resource, ShardSelector: bad}, info, &testLimits, filters)
		var reqErr *errs.RequestError
		if !errors.As(err, &reqErr) || reqErr.Field != errs.FieldShardSelector || !errors.Is(err, errs.ErrInvalidRequest) {
			t.Errorf("%q: %v, want an invalid %s", bad, err, errs.FieldShardSelector)
		}
	}
}

// TestGivenDropsWhatTheLabelSatisfies: a selector given a label (what a
// label index's tree guarantees) selects, among the objects carrying the
// label, exactly what the selector selects; it reads no labels when the
// label was all the selector asked, and keeps every requirement the label
// does not satisfy.
func TestGivenDropsWhatTheLabelSatisfies(t *testing.T) {
	info := upstream.ResourceInfo{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespaced: true}
	given := LabelPair{Key: "sel", Value: "yes"}
	tests := []struct {
		labels string
		whole  bool // the given selector reads no labels
	}{
		{"sel=yes", true},
		{"sel==yes", true},
		{"sel in (yes)", true},
		{"sel=yes,sel in (yes,maybe),sel", true},
		{"sel=yes,sel!=no,!other", false},
		{"sel=yes,app=web", false},
		{"sel=yes,app!=web", false},
		{"sel=yes,sel!=yes", false},
		{"sel=yes,sel=no", false},
		{"app=web", false},
	}
	var objects []*state.Object
	for _, app := range []string{"", "web", "db"} {
		for _, other := range []string{"", "x"} {
			l := labels.Set{"sel": "yes"}
			if app != "" {
				l["app"] = app
			}
			if other != "" {
				l["other"] = other
			}
			objects = append(objects, &state.Object{Namespace: "ns", Name: app + other, Labels: l})
		}
	}
	for _, tt := range tests {
		sel, err := Parse(Spec{Resource: info.Resource, Namespace: "ns", LabelSelector: tt.labels}, info, &testLimits, testCompiler())
		if err != nil {
			t.Fatal(err)
		}
		g := sel.Given(given)
		if g.SelectsWholeNamespaces() != tt.whole {
			t.Errorf("%q given %v: reads labels %v, want %v (%v)", tt.labels, given, !g.SelectsWholeNamespaces(), !tt.whole, g.Labels())
		}
		for _, o := range objects {
			if got, want := g.Matches(o, nil).Match, sel.Matches(o, nil).Match; got != want {
				t.Errorf("%q given %v, object %v: matches %v, want %v", tt.labels, given, o.Labels, got, want)
			}
		}
		if g.Namespace() != "ns" || sel.Labels().String() != labelsOf(t, tt.labels) {
			t.Errorf("%q: Given changed the selector or lost its namespace", tt.labels)
		}
	}
}

// labelsOf is the canonical form of a label selector.
func labelsOf(t *testing.T, s string) string {
	t.Helper()
	l, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return l.String()
}

// testLimits are the hub's default limits (informerhub.DefaultMaxSelectorLength
// and the rest).
var testLimits = Limits{MaxSelectorLength: 4096, MaxFilterLength: 4096, MaxSelectorTerms: 64,
	MaxFiltersPerResource: 32, MaxProjectionsPerResource: 32, MaxFiltersPerOwner: 8, MaxProjectionsPerOwner: 8}

// testCompiler compiles filters within the hub's default costs.
func testCompiler() *celfilter.Compiler { return celfilter.NewCompiler(10_000_000, 10_000) }
