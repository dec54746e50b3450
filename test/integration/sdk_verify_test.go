package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"time"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	hubclient "github.com/informerhub/informerhub/clients/go"
	"github.com/informerhub/informerhub/informerhub"
)

// syncedConfigMapInformer runs a stock SharedIndexInformer of typed
// ConfigMaps of ns on the SDK's ListerWatcher, with labelSelector added by
// its ListOptions as an informer factory's tweak would, until the test
// ends; it returns once the informer synced.
func syncedConfigMapInformer(t *testing.T, addr, ns, labelSelector string) (*hubclient.ListerWatcher, cache.SharedIndexInformer) {
	t.Helper()
	lw := sdkClient(t, addr).ListerWatcher(hubclient.Selector{Resource: configMaps, Namespace: ns}, hubclient.WithScheme(scheme.Scheme))
	tweaked := labelledListerWatcher{lw, labelSelector}
	informer := cache.NewSharedIndexInformer(tweaked, &corev1.ConfigMap{}, 0, cache.Indexers{})
	stop := runInformer(context.Background(), informer)
	t.Cleanup(stop)
	if !cache.WaitForCacheSync(ctxFor(t).Done(), informer.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	return lw, informer
}

// labelledListerWatcher adds a label selector to its ListerWatcher's
// ListOptions, as an informer factory's tweak does.
type labelledListerWatcher struct {
	*hubclient.ListerWatcher
	labelSelector string
}

func (l labelledListerWatcher) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	opts.LabelSelector = l.labelSelector
	return l.ListerWatcher.ListWithContext(ctx, opts)
}

func (l labelledListerWatcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.LabelSelector = l.labelSelector
	return l.ListerWatcher.WatchWithContext(ctx, opts)
}

// waitForStored waits until the informer's store holds name at the
// resourceVersion the API server gave it.
func waitForStored(t *testing.T, informer cache.SharedIndexInformer, cm *corev1.ConfigMap) {
	t.Helper()
	ctx := ctxFor(t)
	for {
		obj, ok, err := informer.GetStore().Get(cm)
		if err == nil && ok && obj.(*corev1.ConfigMap).ResourceVersion == cm.ResourceVersion {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the informer never stored %s at %s", cm.Name, cm.ResourceVersion)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestVerifyCacheFindsTheObjectRemovedFromAStockInformersStore runs a
// stock SharedIndexInformer on the SDK's ListerWatcher, with a label
// selector from its ListOptions: VerifyCache finds its store consistent,
// with the digest of the API server's LIST of the selection; after the
// test removes one object from the store, it names that object and no
// other.
func TestVerifyCacheFindsTheObjectRemovedFromAStockInformersStore(t *testing.T) {
	ns := namespace(t)
	selected := map[string]string{"verify": "yes"}
	for i := range 6 {
		createConfigMap(t, ns, fmt.Sprint("cm-", i), selected, "v0")
	}
	createConfigMap(t, ns, "not-selected", nil, "v0")
	hub := startHub(t, informerhub.Config{})
	lw, informer := syncedConfigMapInformer(t, hub.addr, ns, "verify=yes")
	updateConfigMap(t, ns, "cm-0", selected, "v1")
	deleteConfigMap(t, ns, "cm-1")
	waitForStored(t, informer, createConfigMap(t, ns, "cm-new", selected, "v0"))

	report, err := lw.VerifyCache(ctxFor(t), informer.GetStore())
	if err != nil {
		t.Fatal(err)
	}
	list, err := kube.CoreV1().ConfigMaps(ns).List(ctxFor(t), metav1.ListOptions{LabelSelector: "verify=yes"})
	if err != nil {
		t.Fatal(err)
	}
	var api hubclient.Digest
	for i := range list.Items {
		api.AddObject(&list.Items[i])
	}
	if !report.Consistent() || report.Count != api.Count() || report.Digest != api.String() || report.ResourceVersion != list.ResourceVersion {
		t.Fatalf("VerifyCache of a synced store: %+v; want consistent, %d objects of digest %s at %s, as the API server lists them",
			report, api.Count(), api, list.ResourceVersion)
	}

	removed, ok, err := informer.GetStore().GetByKey(ns + "/cm-3")
	if err != nil || !ok {
		t.Fatalf("cm-3 is not in the store (%v)", err)
	}
	if err := informer.GetStore().Delete(removed); err != nil {
		t.Fatal(err)
	}
	report, err = lw.VerifyCache(ctxFor(t), informer.GetStore())
	if err != nil {
		t.Fatal(err)
	}
	cm := removed.(*corev1.ConfigMap)
	want := []hubclient.CacheDifference{{Namespace: ns, Name: "cm-3", HubUID: string(cm.UID), HubResourceVersion: cm.ResourceVersion}}
	if diff := cmp.Diff(want, report.Differences); diff != "" || report.Consistent() {
		t.Fatalf("VerifyCache after cm-3 was removed from the store: differences (-want +got):\n%s", diff)
	}
	t.Logf("found: %v", report.Differences[0])
}

// TestVerifyCacheSeesNoDifferenceInAStoreThatIsOnlyBehind verifies a
// stock informer's store while an object changes as fast as the API
// server takes it: the store is always a little behind the hub, which is
// no difference.
func TestVerifyCacheSeesNoDifferenceInAStoreThatIsOnlyBehind(t *testing.T) {
	ns := namespace(t)
	for i := range 3 {
		createConfigMap(t, ns, fmt.Sprint("cm-", i), nil, "v0")
	}
	hub := startHub(t, informerhub.Config{})
	lw, informer := syncedConfigMapInformer(t, hub.addr, ns, "")

	ctx, cancel := context.WithCancel(ctxFor(t))
	var writes sync.WaitGroup
	writes.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "cm-0", metav1.GetOptions{})
			if err == nil {
				cm.Data = map[string]string{"v": fmt.Sprint(i)}
				_, err = kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
			}
			if err != nil && ctx.Err() == nil {
				t.Errorf("updating cm-0: %v", err)
				return
			}
		}
	})
	defer func() {
		cancel()
		writes.Wait()
	}()
	for range 3 {
		report, err := lw.VerifyCache(ctxFor(t), informer.GetStore())
		if err != nil {
			t.Fatal(err)
		}
		if !report.Consistent() {
			t.Fatalf("VerifyCache of a store only behind the hub found differences: %v", report.Differences)
		}
	}
}
