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
		fmt.Println(r.GroupVersionResource, r.Kind, r.Namespaced)
	}
	// Output: /v1, Resource=configmaps ConfigMap true
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
