package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/server"
	"github.com/informerhub/informerhub/test/checker"
)

// The durable history (issue 15): each test stops a hub and starts another
// on the same --history-dir, against a real API server and etcd.

// startDurableHub is startHubAt with its history kept in dir. stop closes
// the hub and its store, as a hub process shutting down does; the test's
// end does it too.
func startDurableHub(t *testing.T, restConfig *rest.Config, dir string, cfg informerhub.Config) (h *hub, stop func()) {
	t.Helper()
	store, err := historystore.Open(historystore.Options{Dir: dir, MemTableBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	cfg.HistoryStore = store
	h = startHubOn(t, restConfig, cfg, server.Config{StalledSendGrace: 100 * time.Millisecond})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			h.conn.Close()
			h.Hub.Close()
			if err := store.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop) // before startHubOn's: cleanups run last first
	return h, stop
}

// endOfInitialEvents is readUntil's marker for the bookmark that ends the
// initial events.
const endOfInitialEvents = "\x00end"

// readUntil opens a Watch, records it in tr, and ends it once it has
// delivered an event of the object named marker (or, for
// endOfInitialEvents, the end of its initial events).
func readUntil(t *testing.T, client informerhubv1.InformerHubServiceClient, req *informerhubv1.WatchRequest, tr *checker.Transcript, marker string) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	stream, err := client.Watch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	tr.Open(req.GetResumeToken())
	for {
		resp, err := stream.Recv()
		if err != nil {
			tr.Close(err)
			t.Fatalf("watch from %q ended before %s: %v", req.GetResumeToken(), marker, err)
		}
		e, err := checker.FromWatchResponse(resp)
		if err != nil {
			t.Fatal(err)
		}
		tr.Record(e)
		if e.Name == marker || e.InitialEventsEnd && marker == endOfInitialEvents {
			tr.Close(nil)
			return
		}
	}
}

// checkTranscript checks tr against the reference, once the reference has
// what tr ends with.
func checkTranscript(t *testing.T, ref *checker.Reference, tr *checker.Transcript, opts checker.Options) {
	t.Helper()
	events := tr.Events()
	if err := ref.WaitFor(ctxFor(t), events[len(events)-1].ResourceVersion); err != nil {
		t.Fatal(err)
	}
	if err := checker.Check(ref, tr, opts); err != nil {
		t.Error(err)
	}
}

// TestATokenResumesFromDiskAcrossRestartAndCompaction: a client takes a
// token and goes away; 2,000 changes happen; the hub restarts; etcd is
// compacted; the client resumes. Neither the hub's memory (100 changes)
// nor the API server (compacted) holds the token's position: the disk
// does, and the client's stream equals the API server's watch that ran
// throughout, with no replay.
func TestATokenResumesFromDiskAcrossRestartAndCompaction(t *testing.T) {
	ns := namespace(t)
	w := newWorkload(t, ns, 20)
	ref := startReference(t, ns)
	dir := t.TempDir()
	cfg := informerhub.Config{HistorySize: 100}
	h1, stop1 := startDurableHub(t, cluster.Config, dir, cfg)

	var away checker.Transcript
	req := &informerhubv1.WatchRequest{Selector: watchSelector(ns), SendInitialEvents: true}
	readUntil(t, h1.client, req, &away, endOfInitialEvents)
	w.step(2000)
	// The hub has recorded them all once a new client's initial events
	// hold the marker made after them.
	m := w.marker()
	readUntil(t, h1.client, req, &checker.Transcript{}, m)
	stop1()

	h2, _ := startDurableHub(t, cluster.Config, dir, cfg)
	readUntil(t, h2.client, req, &checker.Transcript{}, m) // h2 has synced
	if _, err := cluster.Compact(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	m = w.marker()
	readUntil(t, h2.client, &informerhubv1.WatchRequest{Selector: watchSelector(ns), ResumeToken: away.LastToken()}, &away, m)
	checkTranscript(t, ref, &away, checker.Options{Namespace: ns, InitialEvents: true})
	if n := len(away.Events()); n < 2000 {
		t.Errorf("the client received %d events, want the 2,000 changes and more", n)
	}
	if st := statsOf(t, h2); st.Replays != 0 {
		t.Errorf("the restarted hub replayed %d tokens from the API server; want the disk to serve them", st.Replays)
	}
}

// TestAGapWhileTheHubWasDownIsMarkedFromRelist: the hub is down while
// objects change and etcd compacts, so the API server (here without a
// watch cache) no longer has the version the hub stopped at. The restarted
// hub relists; a client resuming across the gap gets the real differences,
// each marked from_relist, then exact changes again.
func TestAGapWhileTheHubWasDownIsMarkedFromRelist(t *testing.T) {
	ns := namespace(t)
	upstream := etcdAPIServer(t)
	for _, name := range []string{"a", "b"} {
		createConfigMap(t, ns, name, nil, "0")
	}
	ref := startReference(t, ns)
	dir := t.TempDir()
	h1, stop1 := startDurableHub(t, upstream.Config, dir, informerhub.Config{})
	var tr checker.Transcript
	readUntil(t, h1.client, &informerhubv1.WatchRequest{Selector: watchSelector(ns), SendInitialEvents: true}, &tr, "b")
	stop1()

	updateConfigMap(t, ns, "a", nil, "1")
	updateConfigMap(t, ns, "a", nil, "2")
	deleteConfigMap(t, ns, "b")
	d := createConfigMap(t, ns, "d", nil, "0")
	if err := ref.WaitFor(ctxFor(t), d.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Compact(ctxFor(t)); err != nil {
		t.Fatal(err)
	}

	h2, _ := startDurableHub(t, upstream.Config, dir, informerhub.Config{})
	// Once h2's state has d, it has relisted.
	readUntil(t, h2.client, &informerhubv1.WatchRequest{Selector: watchSelector(ns), SendInitialEvents: true}, &checker.Transcript{}, "d")
	createConfigMap(t, ns, "after", nil, "0")
	readUntil(t, h2.client, &informerhubv1.WatchRequest{Selector: watchSelector(ns), ResumeToken: tr.LastToken()}, &tr, "after")
	checkTranscript(t, ref, &tr, checker.Options{Namespace: ns, InitialEvents: true, Relisted: true})

	got := map[string]string{}
	events := tr.Events()
	for _, e := range events[len(events)-4:] {
		got[e.Name] = fmt.Sprintf("%s from_relist=%v", e.Type, e.FromRelist)
	}
	want := map[string]string{
		"a": "MODIFIED from_relist=true", "b": "DELETED from_relist=true", "d": "ADDED from_relist=true",
		"after": "ADDED from_relist=false",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s after the gap: %q, want %q", name, got[name], w)
		}
	}
	if st := statsOf(t, h2); st.Relists != 1 {
		t.Errorf("the restarted hub relisted %d times, want once", st.Relists)
	}
}

// TestADurableHubKilledDuringWrites: the hub process, with --history-dir,
// is killed with SIGKILL while changes pour in, and started again; 3 times
// here, 20 in make soak. Its subscribers resume exactly each time, and a
// client that went away before the first kill resumes at the end from the
// disk: the history is readable, and no gap is unmarked.
func TestADurableHubKilledDuringWrites(t *testing.T) {
	kills := 3
	if *fullSize {
		kills = 20
	}
	ns := namespace(t)
	w := newWorkload(t, ns, 10)
	ref := startReference(t, ns)
	hub := startHubProcess(t, "--history-dir", t.TempDir(), "--history-size", "50")
	conn, err := grpc.NewClient(hub.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := informerhubv1.NewInformerHubServiceClient(conn)
	subs := []*subscriber{
		subscribe(t, func() informerhubv1.InformerHubServiceClient { return client }, ns, ""),
		subscribe(t, func() informerhubv1.InformerHubServiceClient { return client }, ns, "team=a"),
	}
	var away checker.Transcript
	readUntil(t, client, &informerhubv1.WatchRequest{Selector: watchSelector(ns), SendInitialEvents: true}, &away, endOfInitialEvents)

	for round := range kills {
		w.step(10)
		writing := writeInBackground(t, ns, 5)
		m := w.marker()
		for _, s := range subs {
			s.waitFor(t, m)
		}
		hub.Kill() // while the writes go on: some are written to disk, some not
		if err := writing(); err != nil {
			t.Fatal(err)
		}
		w.step(10) // while no hub runs
		hub.Restart()
		t.Logf("round %d: killed and restarted", round)
	}
	m := w.marker()
	for _, s := range subs {
		s.waitFor(t, m)
		s.check(t, ref, false)
	}
	readUntil(t, client, &informerhubv1.WatchRequest{Selector: watchSelector(ns), ResumeToken: away.LastToken()}, &away, m)
	checkTranscript(t, ref, &away, checker.Options{Namespace: ns, InitialEvents: true})
}

// writeInBackground updates n objects of ns as fast as it can until the
// returned function is called, which returns the first error.
func writeInBackground(t *testing.T, ns string, n int) func() error {
	t.Helper()
	for i := range n {
		createConfigMap(t, ns, fmt.Sprintf("load-%d", i), map[string]string{"team": "a"}, "0")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			_, err := kube.CoreV1().ConfigMaps(ns).Update(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("load-%d", i%n), Labels: map[string]string{"team": "a"}},
				Data:       map[string]string{"v": strconv.Itoa(i)},
			}, metav1.UpdateOptions{})
			if err != nil && ctx.Err() == nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return func() error {
		cancel()
		err := <-done
		for i := range n {
			if err == nil {
				err = kube.CoreV1().ConfigMaps(ns).Delete(bgCtx(), fmt.Sprintf("load-%d", i), metav1.DeleteOptions{})
			}
		}
		return err
	}
}

// TestRetentionExpiresOldTokensWithTheirAge: with a retention of a few
// seconds, the disk deletes the oldest changes as they age; once a token is
// older than what remains and etcd has compacted its version, it is
// OUT_OF_RANGE (RESUME_TOKEN_EXPIRED) with a message saying where the
// history begins and how old that is, and a token within the retention
// still resumes exactly from the disk, its version compacted too.
func TestRetentionExpiresOldTokensWithTheirAge(t *testing.T) {
	ns := namespace(t)
	w := newWorkload(t, ns, 5)
	ref := startReference(t, ns)
	// On the API server without a watch cache, so that after the
	// compaction it cannot replay the old token either.
	h, _ := startDurableHub(t, etcdAPIServer(t).Config, t.TempDir(), informerhub.Config{
		HistorySize: 10, HistoryRetention: 3 * time.Second, HistoryRetentionCheck: 100 * time.Millisecond})
	var old checker.Transcript
	req := &informerhubv1.WatchRequest{Selector: watchSelector(ns), SendInitialEvents: true}
	readUntil(t, h.client, req, &old, endOfInitialEvents)
	oldRV, err := strconv.ParseUint(old.Events()[len(old.Events())-1].ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	// Changes keep coming, and those after the old token age past the
	// retention (only time ages them): the retained window moves past it.
	deadline := time.Now().Add(time.Minute)
	for {
		w.step(5)
		since, rv := retainedWindow(t, h)
		if floor, _ := strconv.ParseUint(rv, 10, 64); floor > oldRV {
			if age := time.Since(since); age > 10*time.Second {
				t.Errorf("the retained window begins %v ago, with a retention of 3s", age)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute, the retained window still begins at resourceVersion %s, before the token at %d", rv, oldRV)
		}
	}
	var recent checker.Transcript
	readUntil(t, h.client, req, &recent, endOfInitialEvents)
	w.step(10)
	if _, err := cluster.Compact(ctxFor(t)); err != nil {
		t.Fatal(err)
	}

	stream, err := h.client.Watch(ctxFor(t), &informerhubv1.WatchRequest{Selector: watchSelector(ns), ResumeToken: old.LastToken()})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.OutOfRange || errorInfo(t, err).GetReason() != "RESUME_TOKEN_EXPIRED" ||
		!strings.Contains(status.Convert(err).Message(), "which begins at resourceVersion") {
		t.Fatalf("a token older than the retention: %v, want OUT_OF_RANGE RESUME_TOKEN_EXPIRED saying where the history begins", err)
	}
	m := w.marker()
	readUntil(t, h.client, &informerhubv1.WatchRequest{Selector: watchSelector(ns), ResumeToken: recent.LastToken()}, &recent, m)
	checkTranscript(t, ref, &recent, checker.Options{Namespace: ns, InitialEvents: true})
}

// retainedWindow returns ListResources' retained window of ConfigMaps.
func retainedWindow(t *testing.T, h *hub) (since time.Time, rv string) {
	t.Helper()
	resp, err := h.client.ListResources(ctxFor(t), &informerhubv1.ListResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.GetResources() {
		if r.GetGroup() == "" && r.GetResource() == "configmaps" {
			return r.GetRetainedSince().AsTime(), r.GetRetainedResourceVersion()
		}
	}
	t.Fatal("ListResources has no configmaps")
	return time.Time{}, ""
}
