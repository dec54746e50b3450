//go:build unix

package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/internal/benchusage"
	"github.com/informerhub/informerhub/server/cork"
)

// BenchmarkGRPCSnapshot reads whole Snapshots over loopback TCP, as
// BENCHMARKS.md's Snapshot scenario reads them (test/bench, hubSnapshot):
// 100,000 ConfigMaps of about 650 B in one namespace, 1% of them labeled
// bench-sel=yes, which the hub's label index serves; served as the binary
// serves them (package cork, the Server's options), read in the default
// pages of 500 by a client with gRPC's default windows that counts the
// responses without decoding them (rawCodec). Each iteration is one
// Snapshot on the same connection. The variants:
//
//   - select=1%/index: the 1000 labeled objects, in two pages;
//   - select=none/index: a label no object carries, one empty page: what
//     a Snapshot call costs besides its objects.
//
// ns/first-page is from opening the stream to its first response;
// cpu-ns/op is the process's CPU time per Snapshot, the client's
// included, which waiting for a CPU on a busy machine does not inflate.
// With -short (make test's bench-smoke), 2,000 objects.
func BenchmarkGRPCSnapshot(b *testing.B) {
	objects := 100000
	if testing.Short() {
		objects = 2000
	}
	addr := serveSnapshotForBench(b, objects)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{proto: encoding.GetCodecV2("proto")})))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	for _, sel := range []struct{ name, labels string }{
		{"select=1%/index", "bench-sel=yes"},
		{"select=none/index", "bench-sel=none"},
	} {
		b.Run(fmt.Sprintf("objects=%d/%s", objects, sel.name), func(b *testing.B) {
			req := &informerhubv1.SnapshotRequest{Selector: &informerhubv1.ResourceSelector{
				Version: "v1", Resource: "configmaps", Namespace: "bench-objects", LabelSelector: sel.labels}}
			// Untimed: the informer's sync, and the label's index.
			readGRPCSnapshot(b, conn, req)
			b.ReportAllocs()
			var firstPage time.Duration
			n := 0
			start := benchusage.Now()
			for b.Loop() {
				firstPage += readGRPCSnapshot(b, conn, req)
				n++
			}
			benchusage.ReportCPUPerOp(b, start, n)
			b.ReportMetric(float64(firstPage.Nanoseconds())/float64(n), "ns/first-page")
		})
	}
}

// serveSnapshotForBench serves, as the binary serves it, a Server on a Hub
// whose cluster holds objects ConfigMaps of about 650 B in the namespace
// bench-objects, every 100th labeled bench-sel=yes.
func serveSnapshotForBench(b *testing.B, objects int) (addr string) {
	cluster := hubtest.NewCluster(b)
	data := strings.Repeat("x", 480) // to the size of BENCHMARKS.md's objects
	for i := range objects {
		l := map[string]string{"app": fmt.Sprint("app-", i%50), "tier": "backend"}
		if i%100 == 0 {
			l["bench-sel"] = "yes"
		}
		cluster.ConfigMaps().Add(hubtest.ConfigMap("bench-objects", fmt.Sprintf("object-%06d", i), l, data))
	}
	hub := informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: EncodeEvent}, cluster, cluster)
	b.Cleanup(hub.Close)
	// No limit on calls, as the end-to-end harness's hub has none
	// (test/bench, startHub).
	srv := New(hub, Config{Logger: discard, AuthzRecheckInterval: time.Hour, RatePerIdentity: 1e9, RateBurstPerIdentity: 1e6})
	g := grpc.NewServer(append(srv.ServerOptions(), grpc.Creds(cork.Credentials(insecure.NewCredentials(), cork.Config{})))...)
	srv.Register(g)
	return serveForBench(b, g, new(atomic.Int64))
}

// readGRPCSnapshot reads a whole Snapshot and returns the time to its first
// response.
func readGRPCSnapshot(b *testing.B, conn *grpc.ClientConn, req *informerhubv1.SnapshotRequest) (firstPage time.Duration) {
	start := time.Now()
	stream, err := conn.NewStream(context.Background(), &grpc.StreamDesc{ServerStreams: true},
		informerhubv1.InformerHubService_Snapshot_FullMethodName, grpc.WaitForReady(true))
	if err == nil {
		err = stream.SendMsg(req)
	}
	if err == nil {
		err = stream.CloseSend()
	}
	var resp rawResponse
	for err == nil {
		err = stream.RecvMsg(&resp)
		if firstPage == 0 {
			firstPage = time.Since(start)
		}
	}
	if !errors.Is(err, io.EOF) {
		b.Fatal(err)
	}
	return firstPage
}
