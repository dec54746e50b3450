package hubtest

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// The resource types a Cluster serves.
var (
	ConfigMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	Namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	Pods       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	Secrets    = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
)

// Cluster serves ConfigMaps and Pods (namespaced), and Namespaces
// (cluster-scoped); Secrets too after ServeSecrets.
type Cluster struct {
	infos   map[schema.GroupVersionResource]upstream.ResourceInfo
	listed  []schema.GroupVersionResource // by Resources
	sources map[schema.GroupVersionResource]*fcache.FakeControllerSource

	// opening is held for reading while a list or watch decides whether it
	// is refused and opens its watch, and for writing by Forbid and
	// Unreachable: a watch the fake opens is refused or open on its source
	// before they return, so a ResetWatch after them ends every watch opened
	// while allowed.
	opening sync.RWMutex

	mu        sync.Mutex // guards started, compacted, refused, lists and fromZero
	started   map[schema.GroupVersionResource]int
	compacted map[schema.GroupVersionResource]int
	// refused is why the lists and watches of a resource type fail (see
	// Forbid, Unreachable); nil while they do not.
	refused map[schema.GroupVersionResource]error
	lists   map[schema.GroupVersionResource]int
	// fromZero is a watch opened with a LIST at version 0, until the
	// reflector that listed asks for it (see listerWatcher.List).
	fromZero map[schema.GroupVersionResource]watch.Interface
}

var (
	_ informerhub.Resolver = (*Cluster)(nil)
	_ informerhub.Source   = (*Cluster)(nil)
)

// NewCluster returns an empty Cluster, shut down when the test ends. Create
// it before any hub that uses it, so that the hub is closed first.
func NewCluster(t testing.TB) *Cluster {
	c := &Cluster{
		infos: map[schema.GroupVersionResource]upstream.ResourceInfo{
			ConfigMaps: {Resource: ConfigMaps, Kind: "ConfigMap", Namespaced: true},
			Namespaces: {Resource: Namespaces, Kind: "Namespace"},
			Pods:       {Resource: Pods, Kind: "Pod", Namespaced: true},
		},
		listed:    []schema.GroupVersionResource{ConfigMaps, Namespaces, Pods},
		sources:   map[schema.GroupVersionResource]*fcache.FakeControllerSource{},
		started:   map[schema.GroupVersionResource]int{},
		compacted: map[schema.GroupVersionResource]int{},
		refused:   map[schema.GroupVersionResource]error{},
		lists:     map[schema.GroupVersionResource]int{},
		fromZero:  map[schema.GroupVersionResource]watch.Interface{},
	}
	for gvr := range c.infos {
		c.addSource(t, gvr)
	}
	return c
}

func (c *Cluster) addSource(t testing.TB, gvr schema.GroupVersionResource) {
	src := fcache.NewFakeControllerSource()
	c.sources[gvr] = src
	t.Cleanup(src.Shutdown)
}

// ServeSecrets makes the cluster serve Secrets as well (for the disk
// history, which writes them only encrypted). Call it before any hub uses
// the cluster.
func (c *Cluster) ServeSecrets(t testing.TB) {
	c.Serve(t, upstream.ResourceInfo{Resource: Secrets, Kind: "Secret", Namespaced: true})
}

// Serve makes the cluster serve one more resource type, whose objects the
// test adds to its Source (of any Go type: the hub reads their JSON). Call
// it before any hub uses the cluster.
func (c *Cluster) Serve(t testing.TB, info upstream.ResourceInfo) {
	c.infos[info.Resource] = info
	c.listed = append(c.listed, info.Resource)
	c.addSource(t, info.Resource)
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

func (c *Cluster) Resolve(_ context.Context, gvr schema.GroupVersionResource) (upstream.ResourceInfo, error) {
	info, ok := c.infos[gvr]
	if !ok {
		return upstream.ResourceInfo{}, fmt.Errorf("%w: %s", upstream.ErrNotServed, upstream.FormatResource(gvr))
	}
	return info, nil
}

func (c *Cluster) Resources(context.Context) ([]upstream.ResourceInfo, error) {
	out := make([]upstream.ResourceInfo, len(c.listed))
	for i, gvr := range c.listed {
		out[i] = c.infos[gvr]
	}
	return out, nil
}

// ListerWatcher lists and watches a resource type: cluster-wide, for an
// informer (counted: see InformersStarted), or in one namespace, for a
// replay.
func (c *Cluster) ListerWatcher(info upstream.ResourceInfo, namespace string) cache.ListerWatcher {
	c.mu.Lock()
	defer c.mu.Unlock()
	lw := &listerWatcher{FakeControllerSource: c.sources[info.Resource], cluster: c, gvr: info.Resource}
	if namespace != "" {
		return &namespaceListerWatcher{listerWatcher: lw, namespace: namespace}
	}
	c.started[info.Resource]++
	return lw
}

// namespaceListerWatcher is a listerWatcher of one namespace: the fake
// serves every namespace, and this keeps the objects of one.
type namespaceListerWatcher struct {
	*listerWatcher
	namespace string
}

func (lw *namespaceListerWatcher) in(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	return err == nil && m.GetNamespace() == lw.namespace
}

func (lw *namespaceListerWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	list, err := lw.listerWatcher.List(opts)
	if err != nil {
		return nil, err
	}
	l := list.(*corev1.List).DeepCopy()
	l.Items = slices.DeleteFunc(l.Items, func(item runtime.RawExtension) bool { return !lw.in(item.Object) })
	return l, nil
}

func (lw *namespaceListerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	w, err := lw.listerWatcher.Watch(opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		return e, e.Type == watch.Error || e.Type == watch.Bookmark || lw.in(e.Object)
	}), nil
}

// Lists counts the LIST calls made of gvr, by informers and replays.
func (c *Cluster) Lists(gvr schema.GroupVersionResource) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lists[gvr]
}

// Compact makes the fake answer like an API server whose etcd was compacted
// at the current version: a watch from an older version gets 410 Gone.
func (c *Cluster) Compact(gvr schema.GroupVersionResource) {
	list, err := c.sources[gvr].List(metav1.ListOptions{})
	if err != nil {
		panic(err)
	}
	rv, _ := strconv.Atoi(list.(*corev1.List).ResourceVersion)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.compacted[gvr] = rv
}

// Forbid makes the fake refuse the lists and watches of gvr with 403
// Forbidden, as an API server does to a hub that lost its RBAC, until it
// is called again with false. Watches already open go on (ResetWatch ends
// them); one being opened as Forbid is called is open when it returns.
func (c *Cluster) Forbid(gvr schema.GroupVersionResource, forbidden bool) {
	var err error
	if forbidden {
		err = apierrors.NewForbidden(gvr.GroupResource(), "", errors.New("the hub may not list or watch it"))
	}
	c.refuse(gvr, err)
}

// Unreachable makes the fake fail the lists and watches of gvr as a client
// does when the API server is down (connection refused), until it is
// called again with false. Watches already open go on, as with Forbid.
func (c *Cluster) Unreachable(gvr schema.GroupVersionResource, unreachable bool) {
	var err error
	if unreachable {
		err = &url.Error{Op: "Get", URL: "https://kube-apiserver/api/v1/" + gvr.Resource, Err: &net.OpError{
			Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED),
		}}
	}
	c.refuse(gvr, err)
}

func (c *Cluster) refuse(gvr schema.GroupVersionResource, err error) {
	c.opening.Lock()
	defer c.opening.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refused[gvr] = err
}

func (lw *listerWatcher) refused() error {
	lw.cluster.mu.Lock()
	defer lw.cluster.mu.Unlock()
	return lw.cluster.refused[lw.gvr]
}

// listerWatcher is the fake of one resource type, answering watches from
// versions it cannot serve as an API server does.
type listerWatcher struct {
	*fcache.FakeControllerSource
	cluster *Cluster
	gvr     schema.GroupVersionResource
}

// IsWatchListSemanticsUnSupported tells the reflector that the fake cannot
// stream initial events.
func (*listerWatcher) IsWatchListSemanticsUnSupported() bool { return true }

// List lists everything (the fake ignores selectors and versions), and
// counts the call.
//
// A LIST of a source that has never changed is at version 0, and the fake
// cannot serve a watch from 0 once a change is made (it expires it, and the
// informer relists, collapsing the changes made in between). The reflector's
// first LIST (ResourceVersion "0") therefore opens a watch before it lists;
// when the LIST is at 0, no change came in between, and the reflector's
// watch from 0 gets that watch, as an API server would serve it.
func (lw *listerWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	lw.cluster.opening.RLock()
	defer lw.cluster.opening.RUnlock()
	return lw.list(opts)
}

// list is List, with the cluster's opening held.
func (lw *listerWatcher) list(opts metav1.ListOptions) (runtime.Object, error) {
	if err := lw.refused(); err != nil {
		return nil, err
	}
	lw.cluster.mu.Lock()
	lw.cluster.lists[lw.gvr]++
	lw.cluster.mu.Unlock()
	var w watch.Interface
	if opts.ResourceVersion == "0" {
		w, _ = lw.FakeControllerSource.Watch(metav1.ListOptions{ResourceVersion: "0"}) // fails once changed
	}
	list, err := lw.FakeControllerSource.List(opts)
	if w == nil {
		return list, err
	}
	if err != nil || list.(*corev1.List).ResourceVersion != "0" {
		w.Stop()
		return list, err
	}
	lw.cluster.mu.Lock()
	defer lw.cluster.mu.Unlock()
	if stale := lw.cluster.fromZero[lw.gvr]; stale != nil {
		stale.Stop() // its reflector stopped before it watched
	}
	lw.cluster.fromZero[lw.gvr] = w
	return list, nil
}

// Watch opens a watch, or refuses it as an API server would. It is refused
// or open before a Forbid or Unreachable returns (see Cluster.opening):
// otherwise it could pass the check before them and open on the broadcaster
// a ResetWatch after them made, and never end.
func (lw *listerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	lw.cluster.opening.RLock()
	defer lw.cluster.opening.RUnlock()
	if err := lw.refused(); err != nil {
		return nil, err
	}
	if opts.ResourceVersion == "0" {
		lw.cluster.mu.Lock()
		w := lw.cluster.fromZero[lw.gvr]
		delete(lw.cluster.fromZero, lw.gvr)
		lw.cluster.mu.Unlock()
		if w != nil {
			return w, nil
		}
	}
	if rv, err := strconv.Atoi(opts.ResourceVersion); err == nil && rv > 0 {
		lw.cluster.mu.Lock()
		compacted := lw.cluster.compacted[lw.gvr]
		lw.cluster.mu.Unlock()
		if rv < compacted {
			return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rv, compacted))
		}
		list, err := lw.list(metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		if latest, _ := strconv.Atoi(list.(*corev1.List).ResourceVersion); rv > latest {
			err := apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", rv, latest), 1)
			err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
			return nil, err
		}
	}
	return lw.FakeControllerSource.Watch(opts)
}

// ConfigMap returns a ConfigMap with one data key "v". Its UID is derived
// from its name, so re-adding it keeps its identity.
func ConfigMap(ns, name string, labels map[string]string, data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, UID: types.UID(ns + "/" + name)},
		Data:       map[string]string{"v": data},
	}
}

// Secret returns a Secret with one data key "v". Its UID is derived from
// its name, so re-adding it keeps its identity.
func Secret(ns, name string, labels map[string]string, data string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, UID: types.UID(ns + "/" + name)},
		Data:       map[string][]byte{"v": []byte(data)},
	}
}

// Pod returns a Pod on a node, in a phase. Its UID is derived from its name,
// so re-adding it keeps its identity.
func Pod(ns, name string, labels map[string]string, node string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, UID: types.UID(ns + "/" + name)},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "nginx"}}},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

// Namespace returns a Namespace. Its UID is derived from its name, so
// re-adding it keeps its identity.
func Namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)},
	}
}

// FilesHolding lists the files under dir that hold s as it is, or base64
// as a Secret's data holds it in its JSON: for tests that look for what a
// disk history must not hold in plaintext.
func FilesHolding(t testing.TB, dir, s string) []string {
	t.Helper()
	forms := [][]byte{[]byte(s), []byte(base64.StdEncoding.EncodeToString([]byte(s)))}
	for {
		var found []string
		vanished := false
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if errors.Is(err, fs.ErrNotExist) {
				vanished = true // Pebble compacted it away meanwhile
				return nil
			}
			for _, f := range forms {
				if bytes.Contains(data, f) {
					found = append(found, filepath.Base(path))
					break
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// A file that vanished moved its contents to one the walk may have
		// missed: search again until the files hold still.
		if !vanished {
			return found
		}
	}
}
