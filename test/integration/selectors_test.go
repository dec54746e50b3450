package integration

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
)

// TestSelectorsFollowWatchSemantics checks label and field selectors against
// the API server's own filtered LIST and watch: objects that start matching
// are ADDED, objects that stop matching are DELETED.
func TestSelectorsFollowWatchSemantics(t *testing.T) {
	ns := namespace(t)
	web, db := map[string]string{"app": "web"}, map[string]string{"app": "db"}
	createConfigMap(t, ns, "a", web, "1")
	createConfigMap(t, ns, "b", db, "1")
	createConfigMap(t, ns, "c", web, "1")
	h := startHub(t, informerhub.Config{})

	tests := []struct {
		name         string
		labels       string
		fields       string
		markerLabels map[string]string // so that the case's marker matches
	}{
		{name: "label equality", labels: "app=web", markerLabels: web},
		{name: "label sets", labels: "app in (db,x),app notin (web)", markerLabels: db},
		{name: "field selector", fields: "metadata.name!=c", markerLabels: nil},
		{name: "labels and fields", labels: "app", fields: "metadata.name!=b,metadata.namespace=" + ns, markerLabels: web},
	}
	type run struct {
		hub *streamReader[informerhubv1.WatchResponse]
		api watch.Interface
	}
	runs := make([]run, len(tests))
	for i, tt := range tests {
		sel := watchSelector(ns)
		sel.LabelSelector, sel.FieldSelector = tt.labels, tt.fields
		runs[i].hub, _ = openWatch(t, h.client, &informerhubv1.WatchRequest{Selector: sel, SendInitialEvents: true})
		initial, end := initialEvents(t, runs[i].hub)
		if diff := cmp.Diff(listAt(t, ns, end.ResourceVersion, tt.labels, tt.fields), initial); diff != "" {
			t.Fatalf("%s: initial events differ from a LIST (-list +hub):\n%s", tt.name, diff)
		}
		runs[i].api = watchConfigMaps(t, ns, end.ResourceVersion, func(o *metav1.ListOptions) {
			o.LabelSelector, o.FieldSelector = tt.labels, tt.fields
		})
	}

	updateConfigMap(t, ns, "a", db, "2")  // leaves app=web, enters app in (db,x)
	updateConfigMap(t, ns, "b", web, "2") // the other way round
	updateConfigMap(t, ns, "c", web, "2") // stays
	updateConfigMap(t, ns, "a", nil, "3") // loses its label
	deleteConfigMap(t, ns, "b")
	for i, tt := range tests {
		createConfigMap(t, ns, fmt.Sprint("marker-", i), tt.markerLabels, "")
	}

	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			marker := fmt.Sprint("marker-", i)
			want := apiChangesUntil(t, runs[i].api, marker)
			if len(want) == 0 {
				t.Fatal("the API server's filtered watch saw no changes: the case tests nothing")
			}
			if diff := cmp.Diff(want, hubChangesUntil(t, runs[i].hub, marker)); diff != "" {
				t.Fatalf("hub changes differ from the API server's filtered watch (-api +hub):\n%s", diff)
			}
		})
	}
}
