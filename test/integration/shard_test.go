package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	hubclient "github.com/informerhub/informerhub/clients/go"
	"github.com/informerhub/informerhub/informerhub"
)

// quarters are four shard selectors of a field, which between them select
// every object once.
func quarters(field string) []string {
	bounds := []string{"0x0000000000000000", "0x4000000000000000", "0x8000000000000000", "0xc000000000000000", "0x10000000000000000"}
	var out []string
	for i := range 4 {
		out = append(out, fmt.Sprintf("shardRange(%s, '%s', '%s')", field, bounds[i], bounds[i+1]))
	}
	return out
}

// TestShardsSelectWhatTheAPIServerSelects: four shards over
// object.metadata.uid and four over object.metadata.namespace, each read by
// a stock client-go informer through the SDK's ListerWatcher (the shard
// selector in its ListOptions, as sharded controllers set it), and by one
// straight from the API server, which shards too (ShardedListAndWatch on):
// through churn on every object, each hub informer ends with the API
// server's own sharded LIST, and the shards are disjoint and cover
// everything.
func TestShardsSelectWhatTheAPIServerSelects(t *testing.T) {
	label := map[string]string{"shard-test": fmt.Sprint(namespaces.Add(1))}
	selector := "shard-test=" + label["shard-test"]
	var nss []string
	for range 6 {
		ns := namespace(t)
		nss = append(nss, ns)
		for i := range 6 {
			createConfigMap(t, ns, fmt.Sprint("cm-", i), label, "v0")
		}
	}
	h := startHub(t, informerhub.Config{})
	client := sdkClient(t, h.addr)
	names := func(store cache.Store) []string {
		var out []string
		for _, obj := range store.List() {
			cm := obj.(*corev1.ConfigMap)
			out = append(out, cm.Namespace+"/"+cm.Name+"@"+cm.ResourceVersion)
		}
		slices.Sort(out)
		return out
	}
	apiList := func(shard string) []string {
		list, err := kube.CoreV1().ConfigMaps("").List(bgCtx(), metav1.ListOptions{LabelSelector: selector, ShardSelector: shard})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, cm := range list.Items {
			out = append(out, cm.Namespace+"/"+cm.Name+"@"+cm.ResourceVersion)
		}
		slices.Sort(out)
		return out
	}
	type shardInformers struct {
		shard    string
		hub, api cache.SharedIndexInformer
	}
	var all []shardInformers
	for _, field := range []string{"object.metadata.uid", "object.metadata.namespace"} {
		for _, shard := range quarters(field) {
			tweak := func(o *metav1.ListOptions) { o.LabelSelector, o.ShardSelector = selector, shard }
			hubLW := client.ListerWatcher(hubclient.Selector{Resource: configMaps}, hubclient.WithScheme(scheme.Scheme))
			s := shardInformers{shard: shard,
				hub: cache.NewSharedIndexInformer(&tweakedLW{lw: hubLW, tweak: tweak}, &corev1.ConfigMap{}, 0, cache.Indexers{}),
				api: cache.NewSharedIndexInformer(cache.NewFilteredListWatchFromClient(kube.CoreV1().RESTClient(), "configmaps", "", tweak),
					&corev1.ConfigMap{}, 0, cache.Indexers{}),
			}
			defer runInformer(ctxFor(t), s.hub)()
			defer runInformer(ctxFor(t), s.api)()
			all = append(all, s)
		}
	}
	for _, s := range all {
		if !cache.WaitForCacheSync(ctxFor(t).Done(), s.hub.HasSynced, s.api.HasSynced) {
			t.Fatal("the informers did not sync")
		}
	}

	// Churn: every object changes, a third are deleted, new ones come.
	var wg sync.WaitGroup
	for _, ns := range nss {
		wg.Go(func() {
			for i := range 6 {
				name := fmt.Sprint("cm-", i)
				if i%3 == 0 {
					deleteConfigMap(t, ns, name)
					createConfigMap(t, ns, fmt.Sprint("new-", i), label, "v0")
				} else {
					updateConfigMap(t, ns, name, label, "v1")
				}
			}
		})
	}
	wg.Wait()

	everything := map[string]int{}
	for _, s := range all {
		want := apiList(s.shard)
		eventually(t, "the informers of "+s.shard+" hold the API server's sharded LIST", func() bool {
			return slices.Equal(names(s.hub.GetStore()), want) && slices.Equal(names(s.api.GetStore()), want)
		})
		for _, n := range want {
			everything[n]++
		}
	}
	if len(everything) != len(nss)*6 {
		t.Fatalf("the shards hold %d objects between them, want %d", len(everything), len(nss)*6)
	}
	for n, count := range everything {
		if count != 2 { // one shard over uids, one over namespaces
			t.Fatalf("%s is in %d shards, want 2 (one of each field): %v", n, count, slices.Sorted(maps.Keys(everything)))
		}
	}
}

// tweakedLW is a ListerWatcher whose ListOptions tweak changes, as
// client-go's informer factories tweak theirs.
type tweakedLW struct {
	lw    cache.ListerWatcherWithContext
	tweak func(*metav1.ListOptions)
}

func (l *tweakedLW) tweaked(o metav1.ListOptions) metav1.ListOptions {
	l.tweak(&o)
	return o
}

func (l *tweakedLW) List(o metav1.ListOptions) (runtime.Object, error) {
	return l.lw.ListWithContext(context.Background(), l.tweaked(o))
}

func (l *tweakedLW) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return l.lw.WatchWithContext(context.Background(), l.tweaked(o))
}

func (l *tweakedLW) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	return l.lw.ListWithContext(ctx, l.tweaked(o))
}

func (l *tweakedLW) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return l.lw.WatchWithContext(ctx, l.tweaked(o))
}

// IsWatchListSemanticsUnSupported is the SDK's: List, then Watch.
func (l *tweakedLW) IsWatchListSemanticsUnSupported() bool { return true }
