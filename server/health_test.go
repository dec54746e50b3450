package server

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

// TestHealthWatchesEndOnceDrained: health Watches, over native gRPC and
// the Connect protocol, see NOT_SERVING when the hub starts shutting down,
// and end with UNAVAILABLE and SHUTTING_DOWN once Drain has returned, so
// that they do not hold the shutdown; one begun after ends so too.
func TestHealthWatchesEndOnceDrained(t *testing.T) {
	cluster := hubtest.NewCluster(t)
	hub := informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: EncodeEvent}, cluster, cluster)
	defer hub.Close()
	srv := New(hub, Config{Logger: discard})
	h := health.NewServer()
	addr := serveOnePort(t, srv, onePortOptions{health: h})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	httpClient := &http.Client{}
	defer httpClient.CloseIdleConnections()
	watchHTTP := connect.NewClient[healthpb.HealthCheckRequest, healthpb.HealthCheckResponse](httpClient, "http://"+addr+healthpb.Health_Watch_FullMethodName)
	type watch struct {
		name string
		next func() (healthpb.HealthCheckResponse_ServingStatus, error)
	}
	open := func() []watch {
		grpcWatch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		httpWatch, err := watchHTTP.CallServerStream(ctx, connect.NewRequest(&healthpb.HealthCheckRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		return []watch{
			{"gRPC", func() (healthpb.HealthCheckResponse_ServingStatus, error) {
				resp, err := grpcWatch.Recv()
				return resp.GetStatus(), err
			}},
			{"Connect", func() (healthpb.HealthCheckResponse_ServingStatus, error) {
				if !httpWatch.Receive() {
					return 0, httpWatch.Err()
				}
				return httpWatch.Msg().Status, nil
			}},
		}
	}
	expect := func(w watch, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		if got, err := w.next(); err != nil || got != want {
			t.Fatalf("%s: %v, %v; want %v", w.name, got, err, want)
		}
	}
	expectShuttingDown := func(w watch) {
		t.Helper()
		_, err := w.next()
		for err == nil { // a status sent before the end
			_, err = w.next()
		}
		var code codes.Code
		var reason string
		if ce := new(connect.Error); errors.As(err, &ce) {
			code = codes.Code(ce.Code())
			for _, d := range ce.Details() {
				if info, err := d.Value(); err == nil {
					if info, ok := info.(*errdetails.ErrorInfo); ok {
						reason = info.Reason
					}
				}
			}
		} else {
			code = status.Code(err)
			reason = errorInfoOf(err).GetReason()
		}
		if code != codes.Unavailable || reason != ReasonShuttingDown {
			t.Fatalf("%s ended with %v, want UNAVAILABLE, SHUTTING_DOWN", w.name, err)
		}
	}

	watches := open()
	for _, w := range watches {
		expect(w, healthpb.HealthCheckResponse_SERVING)
	}
	h.Shutdown() // what the binary does first on SIGTERM
	for _, w := range watches {
		expect(w, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	if err := srv.Drain(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for _, w := range watches {
		expectShuttingDown(w)
	}
	for _, w := range open() {
		expectShuttingDown(w)
	}
}
