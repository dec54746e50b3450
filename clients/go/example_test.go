package hubclient_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

// The examples run against a small demo hub that TestMain starts at
// hubAddress: it serves three ConfigMaps in namespace "demo".

var configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func ExampleNew() {
	// One or more replicas; calls move to the next when one fails.
	// Without WithInsecure the client uses TLS; WithBearerToken or
	// WithTokenSource authenticate it.
	client, err := hubclient.New([]string{hubAddress}, hubclient.WithInsecure())
	if err != nil {
		panic(err)
	}
	defer client.Close()

	resources, err := client.ListResources(context.Background(), "")
	if err != nil {
		panic(err)
	}
	fmt.Println(len(resources), "resource types")
	// Output: 1 resource types
}

func ExampleClient_Watch() {
	client, err := hubclient.New([]string{hubAddress}, hubclient.WithInsecure())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	w := client.Watch(ctx, hubclient.Selector{Resource: configMapsGVR, Namespace: "demo"},
		hubclient.WatchOptions{SendInitialEvents: true})
	defer w.Close()
	for {
		e, err := w.Next()
		if err != nil {
			panic(err) // the context ended, or the hub refused the watch for good
		}
		if e.InitialEventsEnd {
			break // then come the changes; keep e.ResumeToken to continue later
		}
		u, err := e.Unstructured()
		if err != nil {
			panic(err)
		}
		fmt.Println(e.Type, u.GetNamespace()+"/"+u.GetName())
	}
	// Output:
	// ADDED demo/db-2
	// ADDED demo/web-0
	// ADDED demo/web-1
}

func ExampleClient_Snapshot() {
	client, err := hubclient.New([]string{hubAddress}, hubclient.WithInsecure())
	if err != nil {
		panic(err)
	}
	defer client.Close()

	snap, err := client.Snapshot(context.Background(), hubclient.Selector{Resource: configMapsGVR, Namespace: "demo", LabelSelector: "app=web"})
	if err != nil {
		panic(err)
	}
	for _, o := range snap.Objects {
		cm, err := hubclient.DecodeJSON[corev1.ConfigMap](o)
		if err != nil {
			panic(err)
		}
		fmt.Println(cm.Name, cm.Labels["app"])
	}
	// A Watch from snap.ResumeToken delivers exactly the changes after it.
	fmt.Println(snap.ResumeToken != "")
	// Output:
	// web-0 web
	// web-1 web
	// true
}

// ExampleClient_SnapshotWithOptions lists objects projected to the fields
// asked for: the rest of each object is not sent.
func ExampleClient_SnapshotWithOptions() {
	client, err := hubclient.New([]string{hubAddress}, hubclient.WithInsecure())
	if err != nil {
		panic(err)
	}
	defer client.Close()

	snap, err := client.SnapshotWithOptions(context.Background(), hubclient.Selector{Resource: configMapsGVR, Namespace: "demo"},
		hubclient.SnapshotOptions{Fields: []string{"metadata.labels"}})
	if err != nil {
		panic(err)
	}
	for _, o := range snap.Objects {
		cm, err := hubclient.DecodeJSON[corev1.ConfigMap](o)
		if err != nil {
			panic(err)
		}
		fmt.Println(cm.Name, cm.Labels, len(cm.Data))
	}
	// Output:
	// db-2 map[app:db] 0
	// web-0 map[app:web] 0
	// web-1 map[app:web] 0
}

// ExampleWatchOptions follows the phase of the nginx pods of one node. The
// hub selects them, by a field selector on any field the API server
// supports for pods and by a CEL filter; it sends only the field asked for,
// only when it changes, with its state before the change.
func ExampleWatchOptions() {
	client, err := hubclient.New([]string{"hub-0.hub:8080", "hub-1.hub:8080"}, hubclient.WithBearerToken("token"))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()

	pods := hubclient.Selector{
		Resource:      schema.GroupVersionResource{Version: "v1", Resource: "pods"},
		FieldSelector: "spec.nodeName=node-1",
		Filter:        `object.spec.containers.exists(c, c.image.startsWith("nginx"))`,
	}
	w := client.Watch(ctx, pods, hubclient.WatchOptions{Fields: []string{"status.phase"}, IncludePrevious: true})
	defer w.Close()
	for {
		e, err := w.Next()
		if err != nil {
			return // the context ended, or the hub refused the watch for good
		}
		if e.Type != hubclient.Modified {
			continue
		}
		before, err := hubclient.DecodeJSON[corev1.Pod](e.Previous)
		if err != nil {
			panic(err)
		}
		now, err := hubclient.Decode[corev1.Pod](e)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s/%s: %s -> %s\n", now.Namespace, now.Name, before.Status.Phase, now.Status.Phase)
	}
}

func ExampleClient_ListResources() {
	client, err := hubclient.New([]string{hubAddress}, hubclient.WithInsecure())
	if err != nil {
		panic(err)
	}
	defer client.Close()

	resources, err := client.ListResources(context.Background(), "")
	if err != nil {
		panic(err)
	}
	for _, r := range resources {
		// SelectableFields: what a Selector's FieldSelector may name.
		fmt.Println(r.GroupVersionResource, r.Kind, r.Namespaced, r.SelectableFields)
	}
	// Output: /v1, Resource=configmaps ConfigMap true [metadata.name metadata.namespace]
}

// ExampleClient_ListerWatcher runs a stock client-go informer against the
// hub, with typed objects.
func ExampleClient_ListerWatcher() {
	client, err := hubclient.New([]string{hubAddress}, hubclient.WithInsecure())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx, cancel := context.WithCancel(context.Background())

	lw := client.ListerWatcher(hubclient.Selector{Resource: configMapsGVR, Namespace: "demo"}, hubclient.WithScheme(scheme.Scheme))
	informer := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		informer.RunWithContext(ctx)
	}()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		panic("not synced")
	}
	keys := informer.GetStore().ListKeys()
	slices.Sort(keys)
	fmt.Println(keys)
	cancel()
	<-stopped
	// Output: [demo/db-2 demo/web-0 demo/web-1]
}

func ExampleEvent_Unstructured() {
	e := hubclient.Event{Type: hubclient.Modified, Object: []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"demo"},"spec":{"replicas":3}}`)}
	u, err := e.Unstructured()
	if err != nil {
		panic(err)
	}
	replicas, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
	fmt.Println(u.GetKind(), u.GetName(), replicas)
	// Output: Deployment web 3
}

// ExampleWithTokenSource authenticates with a token read for every call,
// such as a projected service account token that the kubelet rotates.
func ExampleWithTokenSource() {
	tokenFile := "/var/run/secrets/tokens/informerhub"
	client, err := hubclient.New([]string{hubAddress},
		hubclient.WithInsecure(), // a real hub: WithTLS instead
		hubclient.WithTokenSource(func(context.Context) (string, error) {
			b, err := os.ReadFile(tokenFile)
			if errors.Is(err, fs.ErrNotExist) {
				return "no-token-in-this-example", nil
			}
			return strings.TrimSpace(string(b)), err
		}))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	resources, err := client.ListResources(context.Background(), "")
	if err != nil {
		panic(err)
	}
	fmt.Println(resources[0].Kind)
	// Output: ConfigMap
}
