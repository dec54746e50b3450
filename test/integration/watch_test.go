package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
)

func createConfigMap(t *testing.T, ns, name string, labels map[string]string, data string) *corev1.ConfigMap {
	t.Helper()
	cm, err := kube.CoreV1().ConfigMaps(ns).Create(bgCtx(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Data:       map[string]string{"v": data},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func updateConfigMap(t *testing.T, ns, name string, labels map[string]string, data string) {
	t.Helper()
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(bgCtx(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Labels, cm.Data = labels, map[string]string{"v": data}
	if _, err := kube.CoreV1().ConfigMaps(ns).Update(bgCtx(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func deleteConfigMap(t *testing.T, ns, name string) {
	t.Helper()
	if err := kube.CoreV1().ConfigMaps(ns).Delete(bgCtx(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func openWatch(t *testing.T, client informerhubv1.InformerHubServiceClient, req *informerhubv1.WatchRequest) (*streamReader[informerhubv1.WatchResponse], context.CancelFunc) {
	t.Helper()
	return openWatchWith(t, client, req, false)
}

// openStartedWatch is openWatch that returns once the subscription exists
// (the hub then sends the response headers): changes made from then on are
// in the stream.
func openStartedWatch(t *testing.T, client informerhubv1.InformerHubServiceClient, req *informerhubv1.WatchRequest) (*streamReader[informerhubv1.WatchResponse], context.CancelFunc) {
	t.Helper()
	return openWatchWith(t, client, req, true)
}

func openWatchWith(t *testing.T, client informerhubv1.InformerHubServiceClient, req *informerhubv1.WatchRequest, waitStarted bool) (*streamReader[informerhubv1.WatchResponse], context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxFor(t))
	stream, err := client.Watch(ctx, req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	if waitStarted {
		if _, err := stream.Header(); err != nil {
			t.Fatalf("Watch(%v): %v", req, err)
		}
	}
	return readStream(stream.Recv), cancel
}

// TestInitialEventsThenChangesMatchTheAPIServer compares a hub stream one for
// one with the API server: its initial events with a LIST at exactly the
// version of the initial-events-end bookmark, its changes with the API
// server's own watch from that version.
func TestInitialEventsThenChangesMatchTheAPIServer(t *testing.T) {
	ns := namespace(t)
	for i := range 20 {
		createConfigMap(t, ns, fmt.Sprintf("cm-%02d", i), map[string]string{"n": fmt.Sprint(i % 3)}, "v0")
	}
	h := startHub(t, informerhub.Config{})
	stream, _ := openWatch(t, h.client, &informerhubv1.WatchRequest{Selector: watchSelector(ns), SendInitialEvents: true})

	initial, end := initialEvents(t, stream)
	if diff := cmp.Diff(listAt(t, ns, end.ResourceVersion, "", ""), initial); diff != "" {
		t.Fatalf("initial events differ from a LIST at %s (-list +hub):\n%s", end.ResourceVersion, diff)
	}

	api := watchConfigMaps(t, ns, end.ResourceVersion)
	for i := range 20 {
		name := fmt.Sprintf("cm-%02d", i)
		switch i % 4 {
		case 0:
			deleteConfigMap(t, ns, name)
		case 1:
			createConfigMap(t, ns, fmt.Sprintf("new-%02d", i), nil, "new")
		default:
			updateConfigMap(t, ns, name, map[string]string{"n": "changed"}, fmt.Sprint("v", i))
		}
	}
	createConfigMap(t, ns, "marker", nil, "")

	want := apiChangesUntil(t, api, "marker")
	if len(want) != 20 {
		t.Fatalf("the API server reported %d changes, want 20", len(want))
	}
	if diff := cmp.Diff(want, hubChangesUntil(t, stream, "marker")); diff != "" {
		t.Fatalf("hub changes differ from the API server's watch (-api +hub):\n%s", diff)
	}
}

// TestResumeWithoutLossOrDuplicates makes 1000 changes across 50 objects
// while a client drops its stream, or its whole connection, again and again
// (also inside its initial events) and resumes from its last token. The
// joined stream must equal the API server's watch.
func TestResumeWithoutLossOrDuplicates(t *testing.T) {
	ns := namespace(t)
	const objects, changes = 50, 1000
	for i := range objects {
		createConfigMap(t, ns, fmt.Sprintf("cm-%02d", i), nil, "v0")
	}
	h := startHub(t, informerhub.Config{})

	// Initial events, interrupted twice.
	var initial []change
	var token string
	req := &informerhubv1.WatchRequest{Selector: watchSelector(ns), SendInitialEvents: true}
	var end *informerhubv1.WatchResponse
	for end == nil {
		stream, cancel := openWatch(t, h.client, req)
		for n := 0; n < 20; n++ {
			resp := stream.next(t)
			token = resp.ResumeToken
			if resp.InitialEventsEnd {
				end = resp
				break
			}
			initial = append(initial, hubChange(t, resp))
		}
		cancel()
		req = &informerhubv1.WatchRequest{Selector: watchSelector(ns), ResumeToken: token}
	}
	if diff := cmp.Diff(listAt(t, ns, end.ResourceVersion, "", ""), initial); diff != "" {
		t.Fatalf("resumed initial events differ from a LIST (-list +hub):\n%s", diff)
	}

	api := watchConfigMaps(t, ns, end.ResourceVersion)
	writerDone := writeChanges(ns, objects, changes)

	var got []change
	client, conn := h.client, (*grpc.ClientConn)(nil)
	for reconnects := 0; ; reconnects++ {
		stream, cancel := openWatch(t, client, &informerhubv1.WatchRequest{Selector: watchSelector(ns), ResumeToken: token})
		reachedMarker := false
		for n := 0; n < 137; n++ {
			resp := stream.next(t)
			checkResponse(t, resp)
			token = resp.ResumeToken
			if resp.Type == informerhubv1.EventType_EVENT_TYPE_BOOKMARK {
				continue
			}
			c := hubChange(t, resp)
			if c.Name == "marker" {
				reachedMarker = true
				break
			}
			got = append(got, c)
		}
		cancel()
		if reachedMarker {
			t.Logf("resumed %d times", reconnects)
			break
		}
		if reconnects%2 == 1 {
			// Drop the whole connection, not only the stream.
			if conn != nil {
				conn.Close()
			}
			var err error
			if conn, err = grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
				t.Fatal(err)
			}
			client = informerhubv1.NewInformerHubServiceClient(conn)
		}
	}
	if conn != nil {
		conn.Close()
	}
	checkJoinedStream(t, writerDone, api, changes, got)
}

// checkJoinedStream waits for writeChanges (done) to end, and compares
// got, what a client joined from its resumed streams, with the API
// server's watch api: n changes, then the marker.
func checkJoinedStream(t *testing.T, done <-chan error, api watch.Interface, n int, got []change) {
	t.Helper()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := apiChangesUntil(t, api, "marker")
	if len(want) != n {
		t.Fatalf("the API server reported %d changes, want %d", len(want), n)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("the joined hub stream differs from the API server's watch (-api +hub):\n%s", diff)
	}
}

// writeChanges makes n changes to the configmaps cm-00 to cm-<objects-1>
// of ns, in turn: updates, and now and then a deletion (the next change to
// that name creates it again); then it creates "marker". The channel
// receives how it ended.
func writeChanges(ns string, objects, n int) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			cms := kube.CoreV1().ConfigMaps(ns)
			deleted := map[string]bool{}
			for i := range n {
				name := fmt.Sprintf("cm-%02d", i%objects)
				var err error
				switch {
				case deleted[name]:
					_, err = cms.Create(bgCtx(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": fmt.Sprint(i)}}, metav1.CreateOptions{})
					deleted[name] = false
				case i%7 == 3:
					err = cms.Delete(bgCtx(), name, metav1.DeleteOptions{})
					deleted[name] = true
				default:
					var cm *corev1.ConfigMap
					if cm, err = cms.Get(bgCtx(), name, metav1.GetOptions{}); err == nil {
						cm.Data = map[string]string{"v": fmt.Sprint(i)}
						_, err = cms.Update(bgCtx(), cm, metav1.UpdateOptions{})
					}
				}
				if err != nil {
					return fmt.Errorf("change %d: %w", i, err)
				}
			}
			_, err := cms.Create(bgCtx(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker"}}, metav1.CreateOptions{})
			return err
		}()
	}()
	return done
}

// TestInitialListWithoutWatchList turns off client-go's streaming initial
// list, so the hub's informer syncs with a LIST, as it does against API
// servers without WatchList. Objects must arrive the same: exact, and with
// their kind and apiVersion (which LIST items lack).
func TestInitialListWithoutWatchList(t *testing.T) {
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	ns := namespace(t)
	for i := range 5 {
		createConfigMap(t, ns, fmt.Sprint("cm-", i), nil, "v0")
	}
	lists := upstreamLists(t, "configmaps")
	h := startHub(t, informerhub.Config{})
	stream, _ := openWatch(t, h.client, &informerhubv1.WatchRequest{Selector: watchSelector(ns), SendInitialEvents: true})
	initial, end := initialEvents(t, stream)
	if got := upstreamLists(t, "configmaps"); got <= lists {
		t.Fatal("the informer did not LIST: the test tests nothing")
	}
	if diff := cmp.Diff(listAt(t, ns, end.ResourceVersion, "", ""), initial); diff != "" {
		t.Fatalf("initial events differ from a LIST (-list +hub):\n%s", diff)
	}
	for _, c := range initial {
		if !strings.Contains(c.Object, `"apiVersion":"v1"`) || !strings.Contains(c.Object, `"kind":"ConfigMap"`) {
			t.Fatalf("object without its type: %s", c.Object)
		}
	}
}
