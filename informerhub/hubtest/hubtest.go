package hubtest

import (
	"context"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"

	"github.com/informerhub/informerhub/informerhub"
)

// The resource types a Cluster serves.
var (
	ConfigMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	Namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// Cluster serves ConfigMaps (namespaced) and Namespaces (cluster-scoped).
type Cluster struct {
	infos   map[schema.GroupVersionResource]informerhub.ResourceInfo
	sources map[schema.GroupVersionResource]*fcache.FakeControllerSource

	mu      sync.Mutex // guards started
	started map[schema.GroupVersionResource]int
}

var (
	_ informerhub.Resolver = (*Cluster)(nil)
	_ informerhub.Source   = (*Cluster)(nil)
)

// NewCluster returns an empty Cluster, shut down when the test ends. Create
// it before any hub that uses it, so that the hub is closed first.
func NewCluster(t testing.TB) *Cluster {
	c := &Cluster{
		infos: map[schema.GroupVersionResource]informerhub.ResourceInfo{
			ConfigMaps: {Resource: ConfigMaps, Kind: "ConfigMap", Namespaced: true},
			Namespaces: {Resource: Namespaces, Kind: "Namespace"},
		},
		sources: map[schema.GroupVersionResource]*fcache.FakeControllerSource{},
		started: map[schema.GroupVersionResource]int{},
	}
	for gvr := range c.infos {
		src := fcache.NewFakeControllerSource()
		c.sources[gvr] = src
		t.Cleanup(src.Shutdown)
	}
	return c
}

// Source returns the fake behind a resource type, to make changes with.
func (c *Cluster) Source(gvr schema.GroupVersionResource) *fcache.FakeControllerSource {
	return c.sources[gvr]
}

// ConfigMaps returns the fake behind ConfigMaps.
func (c *Cluster) ConfigMaps() *fcache.FakeControllerSource { return c.sources[ConfigMaps] }

// InformersStarted counts the informers hubs have started for gvr.
func (c *Cluster) InformersStarted(gvr schema.GroupVersionResource) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started[gvr]
}

func (c *Cluster) Resolve(_ context.Context, gvr schema.GroupVersionResource) (informerhub.ResourceInfo, error) {
	info, ok := c.infos[gvr]
	if !ok {
		return informerhub.ResourceInfo{}, &informerhub.ResourceError{Resource: gvr, Err: informerhub.ErrUnknownResource}
	}
	return info, nil
}

func (c *Cluster) Resources(context.Context) ([]informerhub.ResourceInfo, error) {
	return []informerhub.ResourceInfo{c.infos[ConfigMaps], c.infos[Namespaces]}, nil
}

func (c *Cluster) ListerWatcher(info informerhub.ResourceInfo) cache.ListerWatcher {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started[info.Resource]++
	return noWatchList{c.sources[info.Resource]}
}

// noWatchList tells the reflector that the fake cannot stream initial events.
type noWatchList struct{ *fcache.FakeControllerSource }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// ConfigMap returns a ConfigMap with one data key "v". Its UID is derived
// from its name, so re-adding it keeps its identity.
func ConfigMap(ns, name string, labels map[string]string, data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, UID: types.UID(ns + "/" + name)},
		Data:       map[string]string{"v": data},
	}
}
