// Command informerhub-export exports the changes a hub serves to the sinks
// of a configuration file's routes, each change once, resuming exactly
// where the sink's last change says after any restart (package export).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	ceclient "github.com/cloudevents/sdk-go/v2/client"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"

	hubclient "github.com/informerhub/informerhub/clients/go"
	"github.com/informerhub/informerhub/export"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "informerhub-export:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("informerhub-export", flag.ContinueOnError)
	config := fs.String("config", "", "the configuration file: the hub, the sinks and the routes (docs/export.md)")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	metricsListen := fs.String("metrics-listen", "", "address to serve Prometheus metrics on at /metrics, such as :9090 (none by default)")
	var logLevel slog.Level
	fs.TextVar(&logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *config == "" {
		return errors.New("--config is required")
	}
	opts := &slog.HandlerOptions{Level: logLevel}
	var log *slog.Logger
	switch *logFormat {
	case "text":
		log = slog.New(slog.NewTextHandler(os.Stderr, opts))
	case "json":
		log = slog.New(slog.NewJSONHandler(os.Stderr, opts))
	default:
		return fmt.Errorf("--log-format must be text or json, not %q", *logFormat)
	}
	cfg, err := export.LoadConfig(*config)
	if err != nil {
		return err
	}
	client, err := hubClient(cfg.Hub, log)
	if err != nil {
		return err
	}
	defer client.Close()

	var js jetstream.JetStream
	if cfg.NATS != nil {
		// A server that is down at the start is waited for as one that
		// goes down later is: the routes retry meanwhile.
		nc, err := nats.Connect(cfg.NATS.URL, nats.Name("informerhub-export"), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second),
			nats.RetryOnFailedConnect(true))
		if err != nil {
			return fmt.Errorf("nats %s: %w", cfg.NATS.URL, err)
		}
		defer nc.Close()
		// A publish never acknowledged fails its batch, which is retried
		// from what the stream holds.
		if js, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(30*time.Second)); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := export.NewMetrics(reg)
	if *metricsListen != "" {
		lis, err := net.Listen("tcp", *metricsListen)
		if err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(lis) //nolint:errcheck // ends with Close
		defer srv.Close()
		log.Info("serving metrics", "address", lis.Addr().String())
	}
	// Every sink is made before any route runs, so that a return on an
	// error leaves none running.
	sinks := make([]export.Sink, len(cfg.Routes))
	for i, rc := range cfg.Routes {
		sink, err := sinkOf(rc, cfg.Cluster, js)
		if err != nil {
			return fmt.Errorf("route %s: %w", rc.Name, err)
		}
		if k, ok := sink.(*export.Kafka); ok {
			defer k.Close() // after the routes end
		}
		sinks[i] = sink
	}
	// A route that stops for good stops alone (informerhub_export_route_stopped
	// says so); the command ends, with status 1, once every route has.
	var (
		routes  sync.WaitGroup
		mu      sync.Mutex // guards stopped
		stopped []error
	)
	for i, rc := range cfg.Routes {
		route := &export.Route{Name: rc.Name, Selector: rc.Selector.Selector(), Fields: rc.Fields, Log: log, Metrics: metrics, Sink: sinks[i]}
		routes.Go(func() {
			err := route.Run(ctx, client)
			if errors.Is(err, context.Canceled) {
				return
			}
			log.Error("the route stopped: no retry can fix this", "route", rc.Name, "error", err)
			mu.Lock()
			defer mu.Unlock()
			if stopped = append(stopped, fmt.Errorf("route %s: %w", rc.Name, err)); len(stopped) == len(cfg.Routes) {
				cancel(errors.Join(stopped...))
			}
		})
	}
	routes.Wait()
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// sinkOf makes a route's sink.
func sinkOf(rc export.RouteConfig, cluster string, js jetstream.JetStream) (export.Sink, error) {
	if ce := rc.CloudEvents; ce != nil {
		p, err := cloudevents.NewHTTP(cloudevents.WithTarget(ce.URL))
		if err != nil {
			return nil, err
		}
		mode := ceclient.WithForceBinary()
		if ce.Mode == "structured" {
			mode = ceclient.WithForceStructured()
		}
		client, err := cloudevents.NewClient(p, mode)
		if err != nil {
			return nil, err
		}
		return &export.CloudEvents{Client: client, Cluster: cluster, Checkpoint: export.FileCheckpoint{Path: ce.Checkpoint}}, nil
	}
	if k := rc.Kafka; k != nil {
		return &export.Kafka{Options: []kgo.Opt{kgo.SeedBrokers(k.Brokers...), kgo.ClientID("informerhub-export")},
			Topic: k.Topic, CheckpointTopic: k.Checkpoint(), Route: rc.Name, TransactionalID: k.TransactionalID,
			Cluster: cluster, MaxRecordBytes: k.MaxRecordBytes}, nil
	}
	subject, err := export.ParseSubject(rc.JetStream.Subject)
	if err != nil {
		return nil, err
	}
	return &export.JetStream{JS: js, Stream: rc.JetStream.Stream, Subject: subject, Cluster: cluster,
		Resource: rc.Selector.Selector().Resource}, nil
}

// hubClient connects to the hub as cfg says.
func hubClient(cfg export.Hub, log *slog.Logger) (*hubclient.Client, error) {
	opts := []hubclient.Option{hubclient.WithLogger(log)}
	switch {
	case cfg.Insecure:
		opts = append(opts, hubclient.WithInsecure())
	case cfg.CAFile != "":
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, err
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("hub.caFile: no certificates in %s", cfg.CAFile)
		}
		opts = append(opts, hubclient.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}))
	}
	if cfg.TokenFile != "" {
		opts = append(opts, hubclient.WithTokenFile(cfg.TokenFile))
	}
	return hubclient.New(cfg.Addresses, opts...)
}
