package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/upstream"
	"github.com/informerhub/informerhub/server/metrics"
)

// readiness is whether the hub should receive new clients: it serves gRPC,
// it reaches the API server, the API server delivers to its informers, and
// it is not shutting down. It keeps the
// grpc.health.v1 statuses and /readyz saying the same.
type readiness struct {
	health *health.Server

	mu             sync.Mutex // guards the fields below
	serving        bool
	apiServerErr   error // the last check's failure; nil once the API server answered
	apiServerKnown bool  // the API server has answered once
	shuttingDown   bool
	// staleFeeds says which resource types' informers the API server has
	// delivered nothing to for a while, their lists and watches failing
	// ("" when none): see checkFeeds.
	staleFeeds string
}

func newReadiness(h *health.Server) *readiness {
	r := &readiness{health: h}
	r.publishLocked()
	return r
}

// ready reports whether the hub is ready, and if not, why.
func (r *readiness) ready() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.readyLocked()
}

func (r *readiness) readyLocked() (bool, string) {
	switch {
	case r.shuttingDown:
		return false, "shutting down"
	case !r.serving:
		return false, "not serving gRPC yet"
	case !r.apiServerKnown:
		return false, "the Kubernetes API server has not answered yet"
	case r.apiServerErr != nil:
		return false, "the Kubernetes API server does not answer: " + r.apiServerErr.Error()
	case r.staleFeeds != "":
		return false, "the Kubernetes API server has delivered nothing for a while to the informers of " + r.staleFeeds
	}
	return true, "ok"
}

func (r *readiness) setServing() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.serving = true
	r.publishLocked()
}

// setAPIServer records whether the API server answered (err == nil).
func (r *readiness) setAPIServer(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.apiServerErr = err
	if err == nil {
		r.apiServerKnown = true
	}
	r.publishLocked()
}

// setStaleFeeds records the resource types whose informers are stale.
func (r *readiness) setStaleFeeds(feeds string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.staleFeeds == feeds {
		return
	}
	r.staleFeeds = feeds
	r.publishLocked()
}

// checkFeeds reports, every interval until ctx ends, the informers whose
// lists and watches have been failing, with nothing delivered, for
// staleAfter: new clients should go to replicas that can reach the API
// server. (Those informers end their streams at --max-upstream-failure.)
func checkFeeds(ctx context.Context, stats func() []informerhub.ResourceStats, interval, staleAfter time.Duration, r *readiness, log *slog.Logger) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		var stale []string
		now := time.Now()
		for _, st := range stats() {
			if st.InformerActive && !st.UpstreamFailingSince.IsZero() && now.Sub(st.UpstreamFailingSince) >= staleAfter {
				stale = append(stale, upstream.FormatResource(st.Resource))
			}
		}
		slices.Sort(stale)
		feeds := strings.Join(stale, ", ")
		if feeds != "" {
			log.Warn("informers are stale; not ready for new clients", "resources", feeds)
		}
		r.setStaleFeeds(feeds)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// collector returns informerhub_ready, which says what /readyz says, for
// alerts on replicas that stay unready: 1 ready, 0 not. It is read at
// scrape time.
func (r *readiness) collector() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "informerhub_ready",
		Help: "1 while the hub is ready for new clients (what /readyz and the grpc.health.v1 statuses say), 0 while not: not serving yet, the API server not answering, informers stale, or shutting down (the log says which).",
	}, func() float64 {
		if ok, _ := r.ready(); ok {
			return 1
		}
		return 0
	})
}

// shutDown makes the hub unready for good: load balancers and kubelets
// stop sending new clients while the streams drain.
func (r *readiness) shutDown() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shuttingDown = true
	r.health.Shutdown() // NOT_SERVING, and later updates are ignored
}

func (r *readiness) publishLocked() {
	status := healthpb.HealthCheckResponse_NOT_SERVING
	if ok, _ := r.readyLocked(); ok {
		status = healthpb.HealthCheckResponse_SERVING
	}
	r.health.SetServingStatus("", status)
	r.health.SetServingStatus(informerhubv1.InformerHubService_ServiceDesc.ServiceName, status)
}

// apiServerFailureThreshold is how many checks in a row must fail before
// the hub says it is not ready: one lost request does not take it out of
// its Service.
const apiServerFailureThreshold = 3

// checkAPIServer asks the API server for its version until ctx ends: with
// backoff until it first answers, then every interval, reporting to r.
func checkAPIServer(ctx context.Context, restConfig *rest.Config, interval time.Duration, r *readiness, log *slog.Logger) {
	client, err := discovery.NewDiscoveryClientForConfig(restConfig)
	if err != nil {
		log.Error("cannot check the API server", "error", err)
		return
	}
	answered, failures := false, 0
	for delay := 100 * time.Millisecond; ; {
		checkCtx, cancel := context.WithTimeout(ctx, interval)
		var info struct{ GitVersion string }
		body, err := client.RESTClient().Get().AbsPath("/version").DoRaw(checkCtx)
		cancel()
		if err == nil {
			err = json.Unmarshal(body, &info)
		}
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			if !answered || failures >= apiServerFailureThreshold {
				log.Info("API server reachable", "version", info.GitVersion)
			}
			answered, failures = true, 0
			r.setAPIServer(nil)
		case !answered:
			log.Warn("API server not reachable yet", "error", err)
			r.setAPIServer(err)
		default:
			if failures++; failures == apiServerFailureThreshold {
				log.Warn("API server not reachable; not ready for new clients", "error", err)
				r.setAPIServer(err)
			}
		}
		if answered {
			delay = interval
		} else {
			delay = min(2*delay, interval)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// observabilityHandler serves /metrics, and the probes /healthz (the
// process serves HTTP: restart it if not) and /readyz (see readiness).
func observabilityHandler(m *metrics.Metrics, r *readiness) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/readyz", r)
	return mux
}

// ServeHTTP answers /readyz: 200, or 503 with the reason.
func (r *readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	ok, why := r.ready()
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write([]byte(why + "\n"))
}

// serveHTTP serves handler on lis until ctx ends.
func serveHTTP(ctx context.Context, lis net.Listener, handler http.Handler, what string, log *slog.Logger) {
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	log.Info("serving "+what, "address", lis.Addr().String())
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error(what+" stopped", "error", err)
	}
}
