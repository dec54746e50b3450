package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// flakyHub fails its first Count calls with UNAVAILABLE, then counts.
type flakyHub struct {
	informerhubv1.UnimplementedInformerHubServiceServer
	failures int32
	calls    atomic.Int32
}

func (h *flakyHub) Count(_ *informerhubv1.CountRequest, stream grpc.ServerStreamingServer[informerhubv1.CountResponse]) error {
	if h.calls.Add(1) <= h.failures {
		return status.Error(codes.Unavailable, "restarting")
	}
	return stream.Send(&informerhubv1.CountResponse{Total: 3, ResourceVersion: "7"})
}

// TestTheSDKsReconnectionIsSaid: hubctl shows the SDK's warning for each
// failed attempt to reach the hub, and then its info line saying the hub
// was reached again, which alone tells the user that the warnings are
// over.
func TestTheSDKsReconnectionIsSaid(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hub := &flakyHub{failures: 2}
	informerhubv1.RegisterInformerHubServiceServer(srv, hub)
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"--hub", lis.Addr().String(), "--insecure", "count", "--resource", "configmaps", "--version", "v1", "-n", "demo"},
		&stdout, &stderr, time.Now)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if want := "COUNT\n3\n"; stdout.String() != want {
		t.Errorf("stdout %q, want %q", stdout.String(), want)
	}
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	want := []*regexp.Regexp{
		regexp.MustCompile(`level=WARN msg="not connected to the hub; retrying after a backoff" .*code=Unavailable error=restarting attempt=1 `),
		regexp.MustCompile(`level=WARN msg="not connected to the hub; retrying after a backoff" .*attempt=2 `),
		regexp.MustCompile(`level=INFO msg="reconnected to the hub" .*attempts=2$`),
	}
	if len(lines) != len(want) {
		t.Fatalf("stderr:\n%s\nwant %d lines: two warnings and the reconnection", stderr.String(), len(want))
	}
	for i, re := range want {
		if !re.MatchString(lines[i]) {
			t.Errorf("stderr line %d: %s\nwant it to match %s", i+1, lines[i], re)
		}
	}
}

// TestSDKLogger: the SDK's warnings and its reconnection are shown, with
// the attributes its loggers carry; its other info and debug lines not.
func TestSDKLogger(t *testing.T) {
	var out bytes.Buffer
	log := sdkLogger(&out).With("resource", "configmaps")
	log.Info("watch interrupted; reconnecting", "backoff", "100ms")
	log.Info("re-synced", "events", 3)
	log.Debug("detail")
	log.Warn("not connected to the hub; retrying after a backoff", "attempt", 1)
	log.WithGroup("g").Info(sdkReconnected, "attempts", 1)
	log.Error("broken")
	got := regexp.MustCompile(`time=\S+ `).ReplaceAllString(out.String(), "")
	want := `level=WARN msg="not connected to the hub; retrying after a backoff" resource=configmaps attempt=1` + "\n" +
		`level=INFO msg="reconnected to the hub" resource=configmaps g.attempts=1` + "\n" +
		`level=ERROR msg=broken resource=configmaps` + "\n"
	if got != want {
		t.Errorf("logged:\n%s\nwant:\n%s", got, want)
	}
	if !log.Enabled(context.Background(), slog.LevelInfo) || log.Enabled(context.Background(), slog.LevelDebug) {
		t.Error("the logger is enabled for info (its reconnection line) and not for debug")
	}
}
