package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/internal/controlplane"
)

// relistResult is one relist run: the healthy subscribers' latency over a
// steady window, then over the window after the hub relisted.
type relistResult struct {
	steadyP50, steadyP99 time.Duration
	relistP50, relistP99 time.Duration
	// firstAfter is the greatest latency, over subscribers, of the first
	// writer's change after the relist: how long the relist's batch held
	// up what came after it.
	firstAfter   time.Duration
	short        int     // subscribers that did not receive every change
	disconnected float64 // informerhub_slow_subscriber_disconnects_total
	fellBehind   float64 // informerhub_subscribers_fell_behind_total
}

// relistScenario measures healthy subscribers' latency beside a relist of
// o.RelistObjects changed objects: the hub watches a second API server on
// the same etcd, without a watch cache; while it is down every object of
// the namespace changes and etcd is compacted, so that when it is back the
// hub's watch gets 410 and its informer lists again, and the differences
// land at once.
func relistScenario(ctx context.Context, e *Env, o *Options, r *Report) error {
	const ns = "bench-relist"
	if err := e.createNamespace(ctx, ns); err != nil {
		return err
	}
	w, err := newWriter(ctx, e, ns, o.FanOutObjects, o.ObjectBytes)
	if err != nil {
		return err
	}
	names := make([]string, o.RelistObjects)
	for i := range names {
		names[i] = fmt.Sprintf("relist-%05d", i)
	}
	err = forEach(ctx, len(names), 16, func(ctx context.Context, i int) error {
		_, err := e.kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: names[i]},
			Data:       map[string]string{"generation": "0"},
		}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("creating %d objects: %w", len(names), err)
	}
	upstream, err := e.cp.StartAPIServer("--watch-cache=false")
	if err != nil {
		return err
	}
	defer upstream.Close()
	kubeconfig := filepath.Join(e.dir, "kubeconfig-relist")
	if err := writeKubeconfig(upstream.Config, kubeconfig); err != nil {
		return err
	}
	rate := min(o.FanOutRate, o.FanOutMaxDelivery/float64(o.RelistSubscribers))
	var results []relistResult
	for run := range o.Runs {
		res, err := e.relistRun(ctx, o, upstream, kubeconfig, w, names, run+1, rate)
		if err != nil {
			return fmt.Errorf("run %d: %w", run+1, err)
		}
		o.logf("relist run %d: steady p99 %v, after the relist p99 %v (first change %v), %d short, %.0f disconnected, %.0f fell behind",
			run+1, res.steadyP99, res.relistP99, res.firstAfter, res.short, res.disconnected, res.fellBehind)
		results = append(results, res)
	}
	collect := func(f func(relistResult) float64) Spread {
		var vs []float64
		for _, res := range results {
			vs = append(vs, f(res))
		}
		return spreadOf(vs)
	}
	ratio99 := collect(func(r relistResult) float64 { return ms1(r.relistP99) / ms1(r.steadyP99) })
	disconnected := collect(func(r relistResult) float64 { return r.disconnected + float64(r.short) })
	table := Table{Header: []string{"window", "p50", "p99", "p99 against steady", "first change after the relist", "subscribers fell behind", "subscribers disconnected or short"}}
	table.Rows = append(table.Rows,
		[]string{"steady", collect(func(r relistResult) float64 { return ms1(r.steadyP50) }).format(ms),
			collect(func(r relistResult) float64 { return ms1(r.steadyP99) }).format(ms), "1×", "", "", ""},
		[]string{fmt.Sprintf("after a relist of %d", o.RelistObjects), collect(func(r relistResult) float64 { return ms1(r.relistP50) }).format(ms),
			collect(func(r relistResult) float64 { return ms1(r.relistP99) }).format(ms), ratio99.format(ratio),
			collect(func(r relistResult) float64 { return ms1(r.firstAfter) }).format(ms),
			collect(func(r relistResult) float64 { return r.fellBehind }).format(count), disconnected.format(count)})
	r.Sections = append(r.Sections, Section{
		Title: "11. A relist beside healthy subscribers",
		Intro: fmt.Sprintf(`%d hub subscribers of a namespace receive %.0f changes/s of the writer's ConfigMaps (as in scenario 1) for %v: the steady window. The hub watches a second kube-apiserver on the same etcd, without a watch cache. It is stopped; each of %d other ConfigMaps of the namespace changes; etcd is compacted; it starts again. The hub's watch cannot resume (410), its informer lists again, and the %d differences land in the history at once, beyond every subscriber's queue of 1000: each falls behind and reads them from the history at its own pace. From the moment the hub counts the relist, the writer runs again for %v: the window after the relist. Its changes reach each subscriber after the relist's, so their latency includes the time to deliver the batch. Each run uses a fresh hub; the ratio is per run.`,
			o.RelistSubscribers, rate, o.FanOutDuration, o.RelistObjects, o.RelistObjects, o.FanOutDuration),
		Tables: []Table{table},
	})
	r.Targets = append(r.Targets, Target{
		Name:     fmt.Sprintf("A relist of %d changed objects beside %d subscribers", o.RelistObjects, o.RelistSubscribers),
		Goal:     "no subscriber disconnected; every change delivered",
		Measured: fmt.Sprintf("%s disconnected or short; healthy p99 %s the steady one's", disconnected.format(count), ratio99.format(ratio)),
		Met:      disconnected.Max == 0,
	})
	return nil
}

func (e *Env) relistRun(ctx context.Context, o *Options, upstream *controlplane.APIServer, kubeconfig string, w *writer, names []string, generation int, rate float64) (relistResult, error) {
	var res relistResult
	metricsAddr, err := freeAddr()
	if err != nil {
		return res, err
	}
	hub, err := e.startHub(ctx, "--kubeconfig", kubeconfig, "--metrics-listen", metricsAddr)
	if err != nil {
		return res, err
	}
	defer hub.stop()
	ctx, cancel := context.WithCancel(ctx)
	var rs receivers
	defer rs.stopped()
	defer cancel()
	cs, err := hubConns(hub.addr, min(o.RelistSubscribers, o.FanOutConnections), 0)
	if err != nil {
		return res, err
	}
	defer closeConns(cs)
	req := &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "configmaps", Namespace: w.ns}}
	if err := openHubReceivers(ctx, &rs, cs, req, o.RelistSubscribers); err != nil {
		return res, err
	}
	if err := w.touch(ctx, 0); err != nil {
		return res, err
	}
	if short := rs.waitFor(1, time.Now().Add(time.Minute)); short > 0 {
		return res, fmt.Errorf("%d subscribers did not receive the first change: %w", short, errTimeout)
	}

	steady, err := w.run(ctx, rate, o.FanOutDuration)
	if err != nil {
		return res, err
	}
	if short := rs.waitFor(int64(1+steady), time.Now().Add(o.FanOutDrain)); short > 0 {
		return res, fmt.Errorf("%d subscribers missed steady changes", short)
	}

	if err := upstream.Kill(); err != nil {
		return res, err
	}
	patch := []byte(`{"data":{"generation":"` + strconv.Itoa(generation) + `"}}`)
	err = forEach(ctx, len(names), 16, func(ctx context.Context, i int) error {
		_, err := e.kube.CoreV1().ConfigMaps(w.ns).Patch(ctx, names[i], types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return res, fmt.Errorf("changing %d objects: %w", len(names), err)
	}
	if _, err := e.cp.Compact(ctx); err != nil {
		return res, err
	}
	relists := func() (float64, error) {
		return hubMetric(ctx, metricsAddr, "informerhub_relists_total", `resource="configmaps"`)
	}
	before, err := relists()
	if err != nil {
		return res, err
	}
	if err := upstream.Start(); err != nil {
		return res, err
	}
	// The informer retries with its backoff; the window starts when the
	// hub has taken the relist.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		n, err := relists()
		if err != nil {
			return res, err
		}
		if n > before {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("the hub did not relist: %w", errTimeout)
		}
		time.Sleep(10 * time.Millisecond) // polling a process's metrics: there is nothing to wait on
	}
	after, err := w.run(ctx, rate, o.FanOutDuration)
	if err != nil {
		return res, err
	}
	res.short = rs.waitFor(int64(1+steady+after), time.Now().Add(o.FanOutDrain+time.Minute))
	if res.disconnected, err = hubMetric(ctx, metricsAddr, "informerhub_slow_subscriber_disconnects_total", `resource="configmaps"`); err != nil {
		return res, err
	}
	if res.fellBehind, err = hubMetric(ctx, metricsAddr, "informerhub_subscribers_fell_behind_total", `resource="configmaps"`); err != nil {
		// A hub from before subscribers fell behind (hubbench -only, by
		// hand) has no such metric.
		o.logf("relist: %v; counting none", err)
		res.fellBehind = 0
	}
	cancel()
	rs.stopped()
	var steadyLat, relistLat []time.Duration
	for _, r := range rs.all {
		lat := r.latencies[1:] // not the warm-up change
		steadyLat = append(steadyLat, lat[:min(steady, len(lat))]...)
		if len(lat) > steady {
			relistLat = append(relistLat, lat[steady:]...)
			res.firstAfter = max(res.firstAfter, lat[steady])
		}
	}
	res.steadyP50, res.steadyP99 = percentile(steadyLat, 50), percentile(steadyLat, 99)
	res.relistP50, res.relistP99 = percentile(relistLat, 50), percentile(relistLat, 99)
	return res, nil
}

// hubMetric reads a metric from the hub's /metrics: the sum of the samples
// of name whose labels contain match.
func hubMetric(ctx context.Context, addr, name, match string) (float64, error) {
	body, err := hubMetrics(ctx, addr)
	if err != nil {
		return 0, err
	}
	v, found, err := sumMetric(body, name, match)
	if err == nil && !found {
		err = fmt.Errorf("no %s{%s} in the hub's metrics", name, match)
	}
	return v, err
}

// hubMetrics reads the hub's /metrics, served on addr (--metrics-listen).
func hubMetrics(ctx context.Context, addr string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// writeKubeconfig writes a kubeconfig file for cfg, for a hub process.
func writeKubeconfig(cfg *rest.Config, file string) error {
	c := clientcmdapi.NewConfig()
	c.Clusters["bench"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	c.AuthInfos["bench"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	c.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "bench"}
	c.CurrentContext = "bench"
	data, err := clientcmd.Write(*c)
	if err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o600)
}
