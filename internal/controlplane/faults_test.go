package controlplane_test

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/informerhub/informerhub/internal/controlplane"
)

var cluster *controlplane.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(controlplane.Main(m, func(c *controlplane.ControlPlane) { cluster = c }))
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func namespace(t *testing.T, kube kubernetes.Interface) string {
	t.Helper()
	ns, err := kube.CoreV1().Namespaces().Create(ctxFor(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "faults-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func TestAPIServerKillStart(t *testing.T) {
	ctx := ctxFor(t)
	began := time.Now()
	server, err := cluster.StartAPIServer("--watch-cache=false")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second kube-apiserver ready in %v", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := server.Close(); err != nil {
			t.Error(err)
		}
		if err := server.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
	if server.Config.Host == cluster.Config.Host {
		t.Fatalf("second API server has the shared one's address %s", server.Config.Host)
	}
	kube := kubernetes.NewForConfigOrDie(server.Config)
	ns := namespace(t, kube)
	created, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "survivor"},
		Data:       map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if err := server.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := server.Kill(); err == nil {
		t.Error("second Kill succeeded")
	}
	getCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = kube.CoreV1().ConfigMaps(ns).Get(getCtx, "survivor", metav1.GetOptions{})
	cancel()
	if err == nil {
		t.Fatal("Get succeeded on a killed API server")
	}
	t.Logf("Get on the killed API server: %v", err)
	// The shared API server is unaffected, and sees what was written
	// through the killed one (same etcd).
	shared := kubernetes.NewForConfigOrDie(cluster.Config)
	if _, err := shared.CoreV1().ConfigMaps(ns).Get(ctx, "survivor", metav1.GetOptions{}); err != nil {
		t.Fatalf("shared API server: %v", err)
	}

	began = time.Now()
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted in %v", time.Since(began).Round(time.Millisecond))
	if err := server.Start(); err == nil {
		t.Error("Start on a running API server succeeded")
	}
	got, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "survivor", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Get after restart, same rest.Config: %v", err)
	}
	if got.UID != created.UID || got.Data["k"] != "v" {
		t.Fatalf("after restart got %+v, want %+v", got, created)
	}

	// Kill, then Close without Start.
	if err := server.Kill(); err != nil {
		t.Fatal(err)
	}
}

// Close does not wait for kube-apiserver's graceful shutdown, which waits
// a minute for open watches.
func TestAPIServerCloseWithOpenWatch(t *testing.T) {
	ctx := ctxFor(t)
	server, err := cluster.StartAPIServer()
	if err != nil {
		t.Fatal(err)
	}
	w, err := kubernetes.NewForConfigOrDie(server.Config).CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		server.Close()
		t.Fatal(err)
	}
	defer w.Stop()
	began := time.Now()
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("closed in %v", time.Since(began).Round(time.Millisecond))
	for range w.ResultChan() {
	}
	if err := server.Start(); err == nil {
		t.Error("Start after Close succeeded")
	}
}

func TestAPIServerBadFlag(t *testing.T) {
	if _, err := cluster.StartAPIServer("watch-cache=false"); err == nil {
		t.Fatal("StartAPIServer accepted a flag without --")
	}
}

func TestCompact(t *testing.T) {
	ctx := ctxFor(t)
	uncached, err := cluster.StartAPIServer("--watch-cache=false")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := uncached.Close(); err != nil {
			t.Error(err)
		}
	})
	kube := kubernetes.NewForConfigOrDie(cluster.Config)
	ns := namespace(t, kube)
	cms := kube.CoreV1().ConfigMaps(ns)
	first, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "first"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := first.ResourceVersion
	exact := metav1.ListOptions{ResourceVersion: old, ResourceVersionMatch: metav1.ResourceVersionMatchExact}
	uncachedCMs := kubernetes.NewForConfigOrDie(uncached.Config).CoreV1().ConfigMaps(ns)
	for name, cms := range map[string]typedcorev1.ConfigMapInterface{"shared": cms, "uncached": uncachedCMs} {
		if _, err := cms.List(ctx, exact); err != nil {
			t.Fatalf("%s API server: Exact list at %s before compaction: %v", name, old, err)
		}
	}
	// Two writes: a watch from old starts at old+1, which a compaction at
	// old+1 would keep.
	for _, name := range []string{"second", "third"} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	rev, err := cluster.Compact(ctx)
	if err != nil {
		t.Fatal(err)
	}
	compacted := time.Now()
	if oldRev, err := strconv.ParseInt(old, 10, 64); err != nil || rev <= oldRev+1 {
		t.Fatalf("compacted at %d, not after resourceVersion %s + 1 (%v)", rev, old, err)
	}

	// An API server without the watch cache reads from etcd: 410 at once,
	// for lists and watches.
	_, err = uncachedCMs.List(ctx, exact)
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("uncached API server: Exact list at %s after compaction at %d: got %v, want 410 Gone", old, rev, err)
	}
	w, err := uncachedCMs.Watch(ctx, metav1.ListOptions{ResourceVersion: old})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		status, ok := ev.Object.(*metav1.Status)
		if ev.Type != watch.Error || !ok || status.Code != http.StatusGone {
			t.Fatalf("uncached API server: watch from %s after compaction at %d: got %s %+v, want a 410 error", old, rev, ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no event on a watch from a compacted resourceVersion")
	}

	// The shared API server serves Exact lists from its watch cache's
	// snapshots until it learns of the compaction through compact_rev_key.
	for {
		_, err = cms.List(ctx, exact)
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			break
		}
		if err != nil {
			t.Fatalf("shared API server: Exact list at %s after compaction at %d: %v", old, rev, err)
		}
		if time.Since(compacted) > time.Minute {
			t.Fatalf("shared API server: Exact list at %s still served a minute after compaction at %d", old, rev)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("shared API server: 410 on an Exact list %v after compaction", time.Since(compacted).Round(time.Millisecond))

	rev2, err := cluster.Compact(ctx)
	if err != nil {
		t.Fatalf("second Compact: %v", err)
	}
	if rev2 <= rev {
		t.Fatalf("second Compact at %d, not after %d (the first recorded its revision)", rev2, rev)
	}
}
