package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// change is an event in the form tests compare: what happened to which
// object at which version, and the whole object.
type change struct {
	Type   string
	Name   string
	RV     string
	Object string // canonical JSON
}

func (c change) String() string { return fmt.Sprintf("%s %s@%s", c.Type, c.Name, c.RV) }

func hubChange(t *testing.T, resp *informerhubv1.WatchResponse) change {
	t.Helper()
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON([]byte(resp.Object)); err != nil {
		t.Fatalf("response object is not a Kubernetes object: %v", err)
	}
	return change{
		Type:   strings.TrimPrefix(resp.Type.String(), "EVENT_TYPE_"),
		Name:   u.GetName(),
		RV:     u.GetResourceVersion(),
		Object: canonicalJSON(t, []byte(resp.Object)),
	}
}

func apiChange(t *testing.T, e watch.Event) change {
	t.Helper()
	u, ok := e.Object.(*unstructured.Unstructured)
	if !ok {
		t.Fatalf("API server watch sent %T: %v", e.Object, e.Object)
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	return change{Type: string(e.Type), Name: u.GetName(), RV: u.GetResourceVersion(), Object: canonicalJSON(t, data)}
}

// watchConfigMaps opens a watch straight on the API server: the reference
// every hub stream is compared with.
func watchConfigMaps(t *testing.T, ns, resourceVersion string, opts ...func(*metav1.ListOptions)) watch.Interface {
	t.Helper()
	lo := metav1.ListOptions{ResourceVersion: resourceVersion}
	for _, o := range opts {
		o(&lo)
	}
	w, err := dyn.Resource(configMaps).Namespace(ns).Watch(ctxFor(t), lo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

func withLabels(selector string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) { o.LabelSelector = selector }
}

// apiChangesUntil reads the API server's watch up to the ADDED of marker.
func apiChangesUntil(t *testing.T, w watch.Interface, marker string) []change {
	t.Helper()
	var out []change
	timeout := time.After(time.Minute)
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("API server watch ended")
			}
			if e.Type == watch.Bookmark {
				continue
			}
			c := apiChange(t, e)
			if c.Name == marker && c.Type == "ADDED" {
				return out
			}
			out = append(out, c)
		case <-timeout:
			t.Fatalf("API server watch did not reach %s", marker)
		}
	}
}

// hubChangesUntil reads a hub stream up to the ADDED of marker, checking
// what every response must carry.
func hubChangesUntil(t *testing.T, r *streamReader[informerhubv1.WatchResponse], marker string) []change {
	t.Helper()
	var out []change
	hubResponsesUntil(t, r, marker, func(resp *informerhubv1.WatchResponse) change {
		c := hubChange(t, resp)
		out = append(out, c)
		return c
	})
	return out[:len(out)-1]
}

// hubResponsesUntil reads a hub stream, checking what every response must
// carry, and passes each response but bookmarks to read, up to the one
// read says is the ADDED of marker.
func hubResponsesUntil(t *testing.T, r *streamReader[informerhubv1.WatchResponse], marker string, read func(*informerhubv1.WatchResponse) change) {
	t.Helper()
	for {
		resp := r.next(t)
		checkResponse(t, resp)
		if resp.Type == informerhubv1.EventType_EVENT_TYPE_BOOKMARK {
			continue
		}
		if c := read(resp); c.Name == marker && c.Type == "ADDED" {
			return
		}
	}
}

func checkResponse(t *testing.T, resp *informerhubv1.WatchResponse) {
	t.Helper()
	if resp.ResumeToken == "" {
		t.Fatalf("response without a resume token: %v", resp)
	}
	if resp.ResourceVersion == "" {
		t.Fatalf("response without a resource version: %v", resp)
	}
	if (resp.Type == informerhubv1.EventType_EVENT_TYPE_BOOKMARK) != (resp.Object == "") {
		t.Fatalf("only bookmarks may have no object: %v", resp)
	}
}

// initialEvents reads ADDED responses up to the initial-events-end bookmark.
func initialEvents(t *testing.T, r *streamReader[informerhubv1.WatchResponse]) (added []change, end *informerhubv1.WatchResponse) {
	t.Helper()
	for {
		resp := r.next(t)
		checkResponse(t, resp)
		if resp.InitialEventsEnd {
			if resp.Type != informerhubv1.EventType_EVENT_TYPE_BOOKMARK {
				t.Fatalf("initial_events_end on a %v", resp.Type)
			}
			return added, resp
		}
		if resp.Type != informerhubv1.EventType_EVENT_TYPE_ADDED {
			t.Fatalf("initial event of type %v", resp.Type)
		}
		added = append(added, hubChange(t, resp))
	}
}

// listAt lists configmaps at exactly resourceVersion, as initial events.
func listAt(t *testing.T, ns, resourceVersion, labelSelector, fieldSelector string) []change {
	t.Helper()
	list, err := dyn.Resource(configMaps).Namespace(ns).List(ctxFor(t), metav1.ListOptions{
		ResourceVersion: resourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact,
		LabelSelector: labelSelector, FieldSelector: fieldSelector,
	})
	if err != nil {
		t.Fatal(err)
	}
	return listedChanges(t, list)
}

// listedChanges turns a LIST into initial events, by name.
func listedChanges(t *testing.T, list *unstructured.UnstructuredList) []change {
	t.Helper()
	var out []change
	for _, item := range list.Items {
		// LIST items come without their type; watch events and the hub's
		// objects have it.
		item.SetAPIVersion(list.GetAPIVersion())
		item.SetKind(strings.TrimSuffix(list.GetKind(), "List"))
		data, err := json.Marshal(item.Object)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, change{Type: "ADDED", Name: item.GetName(), RV: item.GetResourceVersion(), Object: canonicalJSON(t, data)})
	}
	slices.SortFunc(out, func(a, b change) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func watchSelector(ns string) *informerhubv1.ResourceSelector {
	return &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: ns}
}

// errorInfo returns the ErrorInfo detail of a gRPC error.
func errorInfo(t *testing.T, err error) *errdetails.ErrorInfo {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	t.Fatalf("error %v has no ErrorInfo", err)
	return nil
}

func bgCtx() context.Context { return context.Background() }
