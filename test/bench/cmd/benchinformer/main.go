// Command benchinformer runs one client-go informer of a core resource type
// in all namespaces, with an event handler that only counts updates: the
// baseline consumer of test/bench's ingest scenario, run as a process of
// its own so that the harness can read its CPU time from /proc.
//
// Two kinds of informer:
//   - dynamic: dynamicinformer.NewFilteredDynamicInformer over the dynamic
//     client, which reads JSON into unstructured objects (client-go's
//     default for it);
//   - typed: the typed clientset's shared informer factory, reading
//     protobuf (ContentType application/vnd.kubernetes.protobuf) into
//     typed objects, as Kubernetes' own controllers do.
//
// Both have a namespace index, as their factories give every informer, and
// resync off.
//
// It prints "synced" on stdout once the informer and its handler have
// synced, then answers commands read from stdin, one a line:
//
//	count     prints "count N": the updates received so far
//	wait N    prints "count M" once M ≥ N updates have been received
//
// At SIGTERM, or at the end of stdin (the harness has gone), it stops the
// CPU profile (-cpuprofile, taken from the sync on), prints "count N" and
// exits.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	var (
		kubeconfig = flag.String("kubeconfig", "", "the cluster's kubeconfig file")
		kind       = flag.String("kind", "dynamic", "dynamic (JSON into unstructured objects) or typed (protobuf into typed objects)")
		resource   = flag.String("resource", "configmaps", "the core/v1 resource type to watch in all namespaces, e.g. configmaps or pods")
		namespace  = flag.String("namespace", "", "count only the updates of objects in this namespace (the informer still watches all)")
		cpuProfile = flag.String("cpuprofile", "", "write a CPU profile, from the sync to the exit, to this file")
	)
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("benchinformer: ")
	if err := run(*kubeconfig, *kind, *resource, *namespace, *cpuProfile); err != nil {
		log.Fatal(err)
	}
}

func run(kubeconfig, kind, resource, namespace, cpuProfile string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", kubeconfig, err)
	}
	// As the hub is run by the harness: client-side rate limits out of the
	// way (an informer lists and watches; they hardly matter).
	cfg.QPS, cfg.Burst = 1000, 1000
	informer, err := newInformer(cfg, kind, resource)
	if err != nil {
		return err
	}
	c := &counter{namespace: namespace, progress: make(chan struct{}, 1)}
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) { c.updated(obj) }})
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var running sync.WaitGroup
	defer running.Wait()
	defer stop()
	running.Go(func() { informer.RunWithContext(ctx) })
	if !cache.WaitFor(ctx, "", informer.HasSyncedChecker(), reg.HasSyncedChecker()) {
		return errors.New("stopped before the informer synced")
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				log.Printf("writing %s: %v", cpuProfile, err)
			}
		}()
	}
	var out output
	out.println("synced")

	// Commands, until stdin ends, which ends the run too. The goroutine is
	// not waited for: it may be blocked reading when the run ends.
	go func() {
		defer stop()
		commands := bufio.NewScanner(os.Stdin)
		for commands.Scan() {
			if err := c.answer(ctx, &out, commands.Text()); err != nil {
				log.Print(err)
				return
			}
		}
	}()
	<-ctx.Done()
	out.println("count " + strconv.FormatInt(c.n.Load(), 10))
	return nil
}

// newInformer makes the informer of kind over resource, in all namespaces,
// with a namespace index and no resync.
func newInformer(cfg *rest.Config, kind, resource string) (cache.SharedIndexInformer, error) {
	gvr := corev1.SchemeGroupVersion.WithResource(resource)
	switch kind {
	case "dynamic":
		client, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
		return dynamicinformer.NewFilteredDynamicInformer(client, gvr, metav1.NamespaceAll, 0, indexers, nil).Informer(), nil
	case "typed":
		cfg = rest.CopyConfig(cfg)
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		generic, err := informers.NewSharedInformerFactory(client, 0).ForResource(gvr)
		if err != nil {
			return nil, err
		}
		return generic.Informer(), nil
	}
	return nil, fmt.Errorf("-kind %q: want dynamic or typed", kind)
}

// counter counts the updates of objects in a namespace (all when empty).
type counter struct {
	namespace string
	n         atomic.Int64
	progress  chan struct{} // signalled (without blocking) after each update
}

// updated is the informer's update handler.
func (c *counter) updated(obj any) {
	if c.namespace != "" {
		m, err := meta.Accessor(obj)
		if err != nil || m.GetNamespace() != c.namespace {
			return
		}
	}
	c.n.Add(1)
	select {
	case c.progress <- struct{}{}:
	default:
	}
}

// answer carries out one command (see the package's documentation).
func (c *counter) answer(ctx context.Context, out *output, command string) error {
	verb, arg, _ := strings.Cut(strings.TrimSpace(command), " ")
	switch verb {
	case "count":
	case "wait":
		target, err := strconv.ParseInt(arg, 10, 64)
		if err != nil {
			return fmt.Errorf("command %q: %w", command, err)
		}
		for c.n.Load() < target {
			select {
			case <-c.progress:
			case <-ctx.Done():
				return nil // the final count answers it
			}
		}
	default:
		return fmt.Errorf("unknown command %q", command)
	}
	out.println("count " + strconv.FormatInt(c.n.Load(), 10))
	return nil
}

// output writes whole lines to stdout from more than one goroutine.
type output struct{ mu sync.Mutex }

func (o *output) println(line string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Println(line)
}
