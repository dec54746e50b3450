package conformance

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/informerhub/informerhub/internal/controlplane"
)

var (
	cluster *controlplane.ControlPlane
	kube    kubernetes.Interface
	dyn     dynamic.Interface

	fullSize = flag.Bool("full-size", false, "run the workloads at the size make soak runs them")
	update   = flag.Bool("update", false, "write docs/conformance.md from the matrix")
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	flag.Parse()
	if *update {
		// Writing the document needs no control plane, and runs nothing
		// else.
		if run := flag.Lookup("test.run").Value.String(); !strings.Contains(run, "TestTheMatrixIsDocumented") {
			fmt.Fprintln(os.Stderr, "-update writes docs/conformance.md: run it with -run TestTheMatrixIsDocumented")
			return 2
		}
		return m.Run()
	}
	klog.SetSlogLogger(slog.New(slog.DiscardHandler))
	var err error
	// The API server shards as the hub does (ShardedListAndWatch, alpha):
	// its sharded LISTs are the oracle of the shard selector's row.
	if cluster, err = controlplane.StartWith(controlplane.Options{FeatureGates: []string{"ShardedListAndWatch=true"}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	etcdServer = cluster.LazyAPIServer("--watch-cache=false", "--feature-gates=ShardedListAndWatch=true")
	cfg := rest.CopyConfig(cluster.Config)
	cfg.QPS, cfg.Burst = 1000, 1000 // the workloads write fast
	kube = kubernetes.NewForConfigOrDie(cfg)
	dyn = dynamic.NewForConfigOrDie(cfg)
	code := 1
	if err := installWidgets(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "installing the widgets CRD:", err)
	} else {
		code = m.Run()
	}
	if code == 0 {
		code = checkEveryCellRan()
	}
	if err := etcdServer.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the second API server:", err)
		code = 1
	}
	return cluster.Finish(code)
}

// etcdServer is started by etcdAPIServer.
var etcdServer *controlplane.LazyAPIServer

// etcdAPIServer returns a second kube-apiserver on the shared etcd,
// without a watch cache: it serves every watch from etcd, so it answers
// 410 Gone as soon as etcd compacts a version, which makes a hub on it
// relist. Started on first use.
func etcdAPIServer(t *testing.T) *controlplane.APIServer {
	t.Helper()
	return etcdServer.Get(t)
}

// widgets is the custom resource of the workloads, with a selectable
// field (spec.color) its field selectors name.
var widgets = schema.GroupVersionResource{Group: "conformance.informerhub.io", Version: "v1", Resource: "widgets"}

var crds = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// widgetCRD is a namespaced CRD of group conformance.informerhub.io whose
// objects have a free-form spec, with spec.color selectable.
func widgetCRD(plural, kind string, selectable ...string) *unstructured.Unstructured {
	var fields []any
	for _, f := range selectable {
		fields = append(fields, map[string]any{"jsonPath": f})
	}
	version := map[string]any{
		"name": "v1", "served": true, "storage": true,
		"schema": map[string]any{"openAPIV3Schema": map[string]any{
			"type": "object",
			"properties": map[string]any{"spec": map[string]any{
				"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				"properties": map[string]any{"color": map[string]any{"type": "string"}},
			}},
		}},
	}
	if len(fields) > 0 {
		version["selectableFields"] = fields
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + "." + widgets.Group},
		"spec": map[string]any{
			"group": widgets.Group, "scope": "Namespaced",
			"names":    map[string]any{"plural": plural, "singular": strings.ToLower(kind), "kind": kind, "listKind": kind + "List"},
			"versions": []any{version},
		},
	}}
}

// installWidgets creates the widgets CRD and waits until the API server
// serves it, with its selectable field.
func installWidgets(ctx context.Context) error {
	return installCRD(ctx, widgetCRD("widgets", "Widget", ".spec.color"), widgets, "spec.color=red")
}

// installCRD creates crd, and waits until the API server serves gvr and
// takes fieldSelector (empty: any) in its LISTs.
func installCRD(ctx context.Context, crd *unstructured.Unstructured, gvr schema.GroupVersionResource, fieldSelector string) error {
	if _, err := dyn.Resource(crds).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{FieldSelector: fieldSelector, Limit: 1})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the API server does not serve %s: %w", gvr.Resource, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// asJSON is v in JSON, for messages.
func asJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
