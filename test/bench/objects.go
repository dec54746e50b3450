package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

const (
	objectsNamespace = "bench-objects"
	// selectedLabel is on every 100th object: a 1% label selection.
	selectedLabel = "bench-sel=yes"
	// idleNamespace has no objects: its subscribers receive nothing.
	idleNamespace = "bench-idle"
)

// createObjects creates n ConfigMaps shaped like a typical application's:
// two labels, a few short settings, and the managedFields the API server
// adds. Every 100th also has selectedLabel.
func (e *Env) createObjects(ctx context.Context, o *Options, n int) error {
	if err := e.createNamespace(ctx, objectsNamespace); err != nil {
		return err
	}
	start := time.Now()
	err := e.createConfigMaps(ctx, objectsNamespace, 0, n)
	o.logf("created %d objects in %v", n, time.Since(start).Round(time.Millisecond))
	return err
}

// createConfigMaps creates the ConfigMaps object-<from> to object-<to - 1>
// in ns, shaped as createObjects says.
func (e *Env) createConfigMaps(ctx context.Context, ns string, from, to int) error {
	return forEach(ctx, to-from, 32, func(ctx context.Context, j int) error {
		i := from + j
		labels := map[string]string{"app": fmt.Sprintf("app-%d", i%50), "tier": "backend"}
		if i%100 == 0 {
			labels["bench-sel"] = "yes"
		}
		_, err := e.kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: configMapName(i), Labels: labels},
			Data: map[string]string{
				"LOG_LEVEL":    "info",
				"DATABASE_URL": fmt.Sprintf("postgres://db-%d.example.svc:5432/app", i%10),
				"FEATURES":     "alpha,beta,gamma",
			},
		}, metav1.CreateOptions{})
		return err
	})
}

// deleteConfigMaps deletes the ConfigMaps createConfigMaps created, 32
// requests at a time, rather than by a DeleteCollection, which the API
// server works through one object at a time (--delete-collection-workers
// is 1 by default) within its request timeout of a minute.
func (e *Env) deleteConfigMaps(ctx context.Context, ns string, from, to int) error {
	return forEach(ctx, to-from, 32, func(ctx context.Context, j int) error {
		return e.kube.CoreV1().ConfigMaps(ns).Delete(ctx, configMapName(from+j), metav1.DeleteOptions{})
	})
}

func configMapName(i int) string { return fmt.Sprintf("object-%06d", i) }

// pagedRead is what reading a paged answer took.
type pagedRead struct {
	firstPage, total time.Duration
	objects          int
	bytes            int64
}

// uidKey occurs once in each object's JSON (the objects have no owner
// references): counting it counts objects without decoding them.
var uidKey = []byte(`"uid":"`)

// hubSnapshot reads a whole Snapshot from the hub, undecoded.
// afterFirstPage, when not nil, is called after the first page arrives; the
// rest is read once it returns.
func hubSnapshot(ctx context.Context, conn *grpc.ClientConn, labelSelector string, afterFirstPage func() error) (pagedRead, error) {
	var res pagedRead
	start := time.Now()
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "Snapshot", ServerStreams: true},
		informerhubv1.InformerHubService_Snapshot_FullMethodName, grpc.ForceCodec(rawCodec{}), grpc.WaitForReady(true))
	if err != nil {
		return res, err
	}
	req := &informerhubv1.SnapshotRequest{Selector: &informerhubv1.ResourceSelector{
		Version: "v1", Resource: "configmaps", Namespace: objectsNamespace, LabelSelector: labelSelector}}
	if err := stream.SendMsg(req); err != nil {
		return res, err
	}
	if err := stream.CloseSend(); err != nil {
		return res, err
	}
	var m rawMessage
	for {
		err := stream.RecvMsg(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return res, err
		}
		if res.firstPage == 0 {
			res.firstPage = time.Since(start)
			if afterFirstPage != nil {
				if err := afterFirstPage(); err != nil {
					return res, err
				}
			}
		}
		res.objects += bytes.Count(m.b, uidKey)
		res.bytes += int64(len(m.b))
	}
	res.total = time.Since(start)
	return res, nil
}

// apiList reads a whole LIST from the API server, in pages of 500 as
// client-go's pager and informers do, undecoded.
func (e *Env) apiList(ctx context.Context, hc *http.Client, labelSelector string) (pagedRead, error) {
	var res pagedRead
	start := time.Now()
	continueToken := ""
	for {
		q := url.Values{"limit": {"500"}}
		if labelSelector != "" {
			q.Set("labelSelector", labelSelector)
		}
		if continueToken != "" {
			q.Set("continue", continueToken)
		}
		page, err := apiGet(ctx, hc, e.configMapsURL(objectsNamespace, q))
		if err != nil {
			return res, err
		}
		body, err := io.ReadAll(page)
		page.Close()
		if err != nil {
			return res, err
		}
		if res.firstPage == 0 {
			res.firstPage = time.Since(start)
		}
		res.objects += bytes.Count(body, uidKey)
		res.bytes += int64(len(body))
		continueToken = listContinue(body)
		if continueToken == "" {
			break
		}
	}
	res.total = time.Since(start)
	return res, nil
}

// listContinue finds metadata.continue, which the API server writes before
// the items, without decoding the page.
func listContinue(page []byte) string {
	v, _ := quotedValue(page[:min(len(page), 1024)], []byte(`"continue":"`))
	return string(v)
}

// informerSync is client-go's own typed informer syncing the ConfigMaps
// over protobuf, as Kubernetes' controllers read: the baseline of the hub's
// startup.
func (e *Env) informerSync(ctx context.Context) (time.Duration, int, error) {
	kube, err := kubernetes.NewForConfig(protobufConfig(e.rest))
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(objectsNamespace))
	informer := factory.Core().V1().ConfigMaps().Informer()
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	factory.Start(ctx.Done())
	// WaitFor, unlike WaitForCacheSync, does not poll (every 100 ms).
	if !cache.WaitFor(ctx, "", informer.HasSyncedChecker()) {
		return 0, 0, fmt.Errorf("the informer did not sync: %w", ctx.Err())
	}
	return time.Since(start), len(informer.GetStore().ListKeys()), nil
}

// protobufConfig is a copy of cfg that reads and writes protobuf, as
// Kubernetes' own components do, rather than client-go's default JSON.
func protobufConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return cfg
}

// perObject is the average size of an object in the pages read.
func (r pagedRead) perObject() float64 { return float64(r.bytes) / float64(max(r.objects, 1)) }
