package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
)

// TestSnapshotEqualsAListAndWatchContinuesFromIt reads a paged snapshot
// while objects change, compares it with a LIST at exactly its
// resourceVersion, and checks that a Watch from its token yields exactly the
// API server's watch from that version.
func TestSnapshotEqualsAListAndWatchContinuesFromIt(t *testing.T) {
	h := startHub(t, informerhub.Config{SnapshotPageSize: 50})
	for _, labels := range []string{"", "tenth=true"} {
		t.Run(fmt.Sprintf("labels %q", labels), func(t *testing.T) {
			// A namespace each: what one case changes must not reach into
			// the next one's snapshot.
			ns := namespace(t)
			for i := range 120 {
				createConfigMap(t, ns, fmt.Sprintf("cm-%03d", i), map[string]string{"tenth": fmt.Sprint(i%10 == 0)}, "v0")
			}
			sel := watchSelector(ns)
			sel.LabelSelector = labels
			stream, err := h.client.Snapshot(ctxFor(t), &informerhubv1.SnapshotRequest{Selector: sel})
			if err != nil {
				t.Fatal(err)
			}
			pages := readStream(stream.Recv)
			firstPage := pages.next(t)

			// Changes while the snapshot is being read do not enter it.
			updateConfigMap(t, ns, "cm-000", map[string]string{"tenth": "true"}, "changed for "+labels)
			deleteConfigMap(t, ns, "cm-010")
			createConfigMap(t, ns, "cm-new", map[string]string{"tenth": "true"}, "v0")

			var objects []change
			var sizes []int
			for page := firstPage; ; page = pages.next(t) {
				if page.ResumeToken != firstPage.ResumeToken || page.ResourceVersion != firstPage.ResourceVersion {
					t.Fatal("pages carry different tokens")
				}
				sizes = append(sizes, len(page.Objects))
				for _, o := range page.Objects {
					objects = append(objects, hubChange(t, &informerhubv1.WatchResponse{Type: informerhubv1.EventType_EVENT_TYPE_ADDED, Object: o}))
				}
				if page.Last {
					break
				}
			}
			if err := pages.end(t); err != nil {
				t.Fatal(err)
			}
			if !slices.IsSortedFunc(objects, func(a, b change) int { return strings.Compare(a.Name, b.Name) }) {
				t.Error("snapshot is not ordered by name")
			}
			want := listAt(t, ns, firstPage.ResourceVersion, labels, "")
			if diff := cmp.Diff(want, objects); diff != "" {
				t.Fatalf("snapshot differs from a LIST at %s (-list +snapshot):\n%s", firstPage.ResourceVersion, diff)
			}
			if labels == "" && !slices.Equal(sizes, []int{50, 50, 20}) {
				t.Errorf("page sizes %v, want [50 50 20]", sizes)
			}

			api := watchConfigMaps(t, ns, firstPage.ResourceVersion, withLabels(labels))
			watch, _ := openWatch(t, h.client, &informerhubv1.WatchRequest{Selector: sel, ResumeToken: firstPage.ResumeToken})
			createConfigMap(t, ns, "marker", map[string]string{"tenth": "true"}, "")
			wantChanges := apiChangesUntil(t, api, "marker")
			if len(wantChanges) != 3 {
				t.Fatalf("the API server reported %v, want 3 changes", wantChanges)
			}
			if diff := cmp.Diff(wantChanges, hubChangesUntil(t, watch, "marker")); diff != "" {
				t.Fatalf("watch from the snapshot's token differs from the API server's (-api +hub):\n%s", diff)
			}
		})
	}
}
