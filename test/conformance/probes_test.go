package conformance

import (
	"encoding/json"
	"hash/fnv"
	"strconv"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/test/checker"
)

// A probe is a row's request: what a stream of a path test asks for, and
// what the oracle makes of it.
type probe struct {
	row  row
	kind *kind
	// request is the probe's Watch in a scenario (its selector, fields,
	// include_previous and object_format), without a token or initial
	// events, which the path sets.
	request func(s *scenario) *informerhubv1.WatchRequest
	// options is what checker.Check makes of it, besides the path's.
	options func(s *scenario) checker.Options
	// listable is set when the API server's LIST with the selector
	// (CheckState) is an oracle of the state the stream builds: a
	// selector the API server evaluates whole, and no projection.
	listable bool
	// quiet is set when the probe selects nothing: its stream has nothing
	// to fall behind on, catch up or replay.
	quiet bool
	// initial makes a path that starts streams now start this one with
	// initial events.
	initial bool
}

// lowerHalf is a shard selector of the objects whose uid hashes below
// 2^63.
const lowerHalf = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"

// evenN is a filter on ConfigMaps' data.n, which some have not (the
// filter fails: no such key) and some hold "x" (it fails again): those are
// selected, marked.
const evenN = `int(object.data.n) % 2 == 0`

// probes are the rows' requests. Every path test runs those its path
// carries, at once.
var probes = []probe{
	{row: rowResource, kind: kindWidgets, listable: true,
		request: func(s *scenario) *informerhubv1.WatchRequest {
			return watchOf(kindWidgets, &informerhubv1.ResourceSelector{Namespace: s.nsB})
		},
		options: func(s *scenario) checker.Options { return checker.Options{Namespace: s.nsB} }},
	{row: rowNamespace, kind: kindConfigMaps, listable: true,
		request: func(s *scenario) *informerhubv1.WatchRequest {
			return watchOf(kindConfigMaps, &informerhubv1.ResourceSelector{Namespace: s.nsA})
		},
		options: func(s *scenario) checker.Options { return checker.Options{Namespace: s.nsA} }},
	{row: rowLabels, kind: kindConfigMaps, listable: true,
		request: func(s *scenario) *informerhubv1.WatchRequest {
			return watchOf(kindConfigMaps, &informerhubv1.ResourceSelector{LabelSelector: "run=" + s.run + ",app=web"})
		},
		options: func(s *scenario) checker.Options { return checker.Options{LabelSelector: "run=" + s.run + ",app=web"} }},
	{row: rowFields, kind: kindEvents, listable: true,
		request: func(s *scenario) *informerhubv1.WatchRequest {
			return watchOf(kindEvents, &informerhubv1.ResourceSelector{Namespace: s.nsA, FieldSelector: "reason=Hot"})
		},
		options: func(s *scenario) checker.Options {
			return checker.Options{Namespace: s.nsA, FieldSelector: "reason=Hot", Match: fieldIs("reason", "Hot")}
		}},
	{row: rowCRDFields, kind: kindWidgets, listable: true,
		request: func(s *scenario) *informerhubv1.WatchRequest {
			return watchOf(kindWidgets, &informerhubv1.ResourceSelector{Namespace: s.nsA, FieldSelector: "spec.color=red"})
		},
		options: func(s *scenario) checker.Options {
			return checker.Options{Namespace: s.nsA, FieldSelector: "spec.color=red", Match: fieldIs("spec", "color", "red")}
		}},
	{row: rowFilter, kind: kindConfigMaps,
		request: func(s *scenario) *informerhubv1.WatchRequest {
			return watchOf(kindConfigMaps, &informerhubv1.ResourceSelector{LabelSelector: "run=" + s.run, Filter: evenN})
		},
		options: func(s *scenario) checker.Options {
			return checker.Options{LabelSelector: "run=" + s.run, Match: evenNOf}
		}},
	{row: rowShard, kind: kindConfigMaps, listable: true,
		request: func(s *scenario) *informerhubv1.WatchRequest {
			return watchOf(kindConfigMaps, &informerhubv1.ResourceSelector{LabelSelector: "run=" + s.run, ShardSelector: lowerHalf})
		},
		options: func(s *scenario) checker.Options {
			return checker.Options{LabelSelector: "run=" + s.run, ShardSelector: lowerHalf,
				Match: func(e checker.Event) (bool, bool) { return uidInLowerHalf(e.UID), false }}
		}},
	{row: rowProjection, kind: kindConfigMaps,
		request: func(s *scenario) *informerhubv1.WatchRequest {
			w := watchOf(kindConfigMaps, &informerhubv1.ResourceSelector{Namespace: s.nsA})
			w.Fields = []string{"data.n", "data.payload"}
			return w
		},
		options: func(s *scenario) checker.Options {
			return checker.Options{Namespace: s.nsA, Project: project("data", "n", "payload")}
		}},
	{row: rowPrevious, kind: kindConfigMaps, listable: true,
		request: func(s *scenario) *informerhubv1.WatchRequest {
			w := watchOf(kindConfigMaps, &informerhubv1.ResourceSelector{Namespace: s.nsA})
			w.IncludePrevious = true
			return w
		},
		options: func(s *scenario) checker.Options { return checker.Options{Namespace: s.nsA, IncludePrevious: true} }},
	{row: rowFormat, kind: kindConfigMaps, listable: true,
		request: func(s *scenario) *informerhubv1.WatchRequest {
			w := watchOf(kindConfigMaps, &informerhubv1.ResourceSelector{Namespace: s.nsB})
			w.ObjectFormat = informerhubv1.ObjectFormat_OBJECT_FORMAT_STRUCT
			return w
		},
		options: func(s *scenario) checker.Options { return checker.Options{Namespace: s.nsB} }},
	{row: rowToken, kind: kindConfigMaps, listable: true,
		request: func(s *scenario) *informerhubv1.WatchRequest {
			return watchOf(kindConfigMaps, &informerhubv1.ResourceSelector{LabelSelector: "run=" + s.run})
		},
		options: func(s *scenario) checker.Options { return checker.Options{LabelSelector: "run=" + s.run} }},
	{row: rowInitial, kind: kindConfigMaps, listable: true, initial: true,
		request: func(s *scenario) *informerhubv1.WatchRequest {
			return watchOf(kindConfigMaps, &informerhubv1.ResourceSelector{Namespace: s.nsA})
		},
		options: func(s *scenario) checker.Options { return checker.Options{Namespace: s.nsA} }},
	// Selects only what the churn never writes: bookmarks alone, whose
	// tokens the path tests resume from.
	{row: rowBookmarks, kind: kindConfigMaps, listable: true, quiet: true,
		request: func(s *scenario) *informerhubv1.WatchRequest {
			return watchOf(kindConfigMaps, &informerhubv1.ResourceSelector{Namespace: s.nsB, LabelSelector: "app=none"})
		},
		options: func(s *scenario) checker.Options { return checker.Options{Namespace: s.nsB, LabelSelector: "app=none"} }},
}

// probesFor are the probes of the rows a column has cells for.
func probesFor(c column) []probe {
	var out []probe
	for _, p := range probes {
		if test, _ := cellFor(p.row, c); test {
			out = append(out, p)
		}
	}
	return out
}

func watchOf(k *kind, sel *informerhubv1.ResourceSelector) *informerhubv1.WatchRequest {
	sel.Group, sel.Version, sel.Resource = k.gvr.Group, k.gvr.Version, k.gvr.Resource
	return &informerhubv1.WatchRequest{Selector: sel}
}

// decoded is an event's object, decoded.
func decoded(e checker.Event) map[string]any {
	var obj map[string]any
	_ = json.Unmarshal([]byte(e.Object), &obj)
	return obj
}

// at is the value at path of a decoded object.
func at(obj map[string]any, path ...string) (any, bool) {
	var v any = obj
	for _, name := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[name]; !ok {
			return nil, false
		}
	}
	return v, true
}

// fieldIs selects the objects with value at path: a field selector as the
// API server evaluates it on these objects.
func fieldIs(pathAndValue ...string) func(checker.Event) (bool, bool) {
	path, value := pathAndValue[:len(pathAndValue)-1], pathAndValue[len(pathAndValue)-1]
	return func(e checker.Event) (bool, bool) {
		v, _ := at(decoded(e), path...)
		return v == value, false
	}
}

// evenNOf is evenN, computed apart: data.n a decimal integer, even; an
// object whose data.n is missing or not one is undecided, so selected.
func evenNOf(e checker.Event) (selected, undecided bool) {
	v, ok := at(decoded(e), "data", "n")
	if !ok {
		return true, true
	}
	s, _ := v.(string)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return true, true
	}
	return n%2 == 0, false
}

// uidInLowerHalf is lowerHalf as KEP-5866 defines it: the FNV-1a 64-bit
// hash of the uid, below 2^63.
func uidInLowerHalf(uid string) bool {
	h := fnv.New64a()
	h.Write([]byte(uid))
	return h.Sum64() < 1<<63
}

// project is a projection onto parent's keys, as the proto defines one:
// the identity (apiVersion, kind, metadata's name, namespace, uid and
// resourceVersion) and, when the object has parent, parent with those of
// keys it has.
func project(parent string, keys ...string) func(string) (string, error) {
	return func(object string) (string, error) {
		var obj map[string]any
		if err := json.Unmarshal([]byte(object), &obj); err != nil {
			return "", err
		}
		out := map[string]any{"apiVersion": obj["apiVersion"], "kind": obj["kind"]}
		meta, _ := obj["metadata"].(map[string]any)
		kept := map[string]any{}
		for _, k := range []string{"name", "namespace", "uid", "resourceVersion"} {
			if v, ok := meta[k]; ok {
				kept[k] = v
			}
		}
		out["metadata"] = kept
		if p, ok := obj[parent].(map[string]any); ok {
			sub := map[string]any{}
			for _, k := range keys {
				if v, ok := p[k]; ok {
					sub[k] = v
				}
			}
			out[parent] = sub
		}
		b, err := json.Marshal(out)
		if err != nil {
			return "", err
		}
		return checker.Canonical(b)
	}
}
