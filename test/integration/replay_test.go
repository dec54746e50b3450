package integration

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/internal/testhub"
)

// TestTokensOutliveTheHub resumes, on a freshly started hub whose history
// begins after the token, from tokens of a hub that is gone: the changes in
// between are replayed from the API server, with the subscription's
// selector (an object that left it during the gap arrives as DELETED), and
// the stream continues from the new hub's history with nothing lost or
// repeated.
func TestTokensOutliveTheHub(t *testing.T) {
	for _, tt := range []struct{ name, labels string }{{"all", ""}, {"team-a", "team=a"}} {
		t.Run(tt.name, func(t *testing.T) {
			name := tt.name
			ns := namespace(t)
			for i := range 4 {
				createConfigMap(t, ns, fmt.Sprint("cm-", i), map[string]string{"team": "a"}, "v0")
			}
			sel := watchSelector(ns)
			sel.LabelSelector = tt.labels
			hub := startRestartableHub(t, informerhub.Config{})
			client := informerhubv1.NewInformerHubServiceClient(dial(t, hub.addr))
			r, cancel := openStartedWatch(t, client, &informerhubv1.WatchRequest{Selector: sel})
			marker := "m0-" + name
			createConfigMap(t, ns, marker, map[string]string{"team": "a"}, "")
			var token, rv string
			for token == "" {
				resp := r.next(t)
				if resp.Type == informerhubv1.EventType_EVENT_TYPE_ADDED && hubChange(t, resp).Name == marker {
					token, rv = resp.ResumeToken, resp.ResourceVersion
				}
			}
			cancel()
			hub.kill()
			api := watchConfigMaps(t, ns, rv, withLabels(tt.labels))

			// While no hub runs: an update, a delete, an object that
			// leaves the selector and one that enters it.
			updateConfigMap(t, ns, "cm-0", map[string]string{"team": "a"}, "v1")
			deleteConfigMap(t, ns, "cm-1")
			updateConfigMap(t, ns, "cm-2", map[string]string{"team": "b"}, "v1")
			createConfigMap(t, ns, "new-"+name, map[string]string{"team": "a"}, "")
			// The new hub's informer lists after those changes: its
			// history cannot place the token.
			hub.start()
			resumed, _ := openStartedWatch(t, client, &informerhubv1.WatchRequest{Selector: sel, ResumeToken: token})
			updateConfigMap(t, ns, "cm-3", map[string]string{"team": "a"}, "v1") // after the restart
			end := "m1-" + name
			createConfigMap(t, ns, end, map[string]string{"team": "a"}, "")
			want := apiChangesUntil(t, api, end)
			got := hubChangesUntil(t, resumed, end)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("resumed stream differs from the API server's watch (-api +hub):\n%s", diff)
			}
		})
	}
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	return testhub.Dial(t, addr)
}
