package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

func heldEvent(t hubclient.EventType, name, uid, rv string) hubclient.Event {
	return hubclient.Event{Type: t, Object: fmt.Appendf(nil, `{"metadata":{"namespace":"demo","name":%q,"uid":%q,"resourceVersion":%q}}`, name, uid, rv)}
}

// TestHeldObjectsKeepTheDigestOfWhatTheyHold applies events as the SDK
// delivers them, a re-sync that lists every object among them, and
// compares the digest with the one of the objects held at the end.
func TestHeldObjectsKeepTheDigestOfWhatTheyHold(t *testing.T) {
	h := newHeldObjects()
	for _, e := range []hubclient.Event{
		heldEvent(hubclient.Added, "a", "u1", "1"),
		heldEvent(hubclient.Added, "b", "u2", "2"),
		heldEvent(hubclient.Added, "c", "u3", "3"),
		heldEvent(hubclient.Modified, "a", "u1", "4"),
		// A DELETED carries the deletion's resourceVersion, not the
		// held one.
		heldEvent(hubclient.Deleted, "b", "u2", "5"),
	} {
		if err := h.apply(e); err != nil {
			t.Fatal(err)
		}
	}
	var want hubclient.Digest
	want.Add("demo", "a", "u1", "4")
	want.Add("demo", "c", "u3", "3")
	if h.digest != want {
		t.Fatalf("after the events: %s of %d, want %s of %d", h.digest, h.digest.Count(), want, want.Count())
	}

	// A re-sync that lists every object: c is not listed, and goes at its
	// end; until then the copy is of no one position.
	resynced := heldEvent(hubclient.Added, "a", "u1", "9")
	resynced.Resync, resynced.ResyncReplaces = true, true
	if err := h.apply(resynced); err != nil {
		t.Fatal(err)
	}
	if !h.resyncing {
		t.Fatal("in the middle of a re-sync, the copy is said to be of one position")
	}
	if err := h.apply(hubclient.Event{Type: hubclient.Bookmark, Resync: true, ResyncReplaces: true}); err != nil {
		t.Fatal(err)
	}
	want = hubclient.Digest{}
	want.Add("demo", "a", "u1", "9")
	if h.resyncing || h.digest != want || len(h.objects) != 1 {
		t.Fatalf("after the re-sync: %s of %d (resyncing %v), want %s of 1", h.digest, h.digest.Count(), h.resyncing, want)
	}
	if err := h.apply(hubclient.Event{Type: hubclient.Added, Object: []byte("{")}); err == nil {
		t.Error("an object that is not JSON was applied")
	}
}

// digestHub serves a Snapshot of one object and answers Digest with
// digest.
type digestHub struct {
	informerhubv1.UnimplementedInformerHubServiceServer
	digest *informerhubv1.DigestResponse
}

func (h *digestHub) Snapshot(_ *informerhubv1.SnapshotRequest, stream grpc.ServerStreamingServer[informerhubv1.SnapshotResponse]) error {
	return stream.Send(&informerhubv1.SnapshotResponse{Last: true, ResumeToken: "t10", ResourceVersion: "10",
		Objects: []string{`{"metadata":{"namespace":"demo","name":"a","uid":"u1","resourceVersion":"10"}}`}})
}

func (h *digestHub) Digest(context.Context, *informerhubv1.DigestRequest) (*informerhubv1.DigestResponse, error) {
	return h.digest, nil
}

// runVerify runs hubctl verify once against hub.
func runVerify(t *testing.T, hub *digestHub) (stdout, stderr string, code int) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	informerhubv1.RegisterInformerHubServiceServer(srv, hub)
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code = run(ctx, []string{"--hub", lis.Addr().String(), "--insecure", "verify", "--resource", "configmaps", "--version", "v1", "-n", "demo"},
		&out, &errOut, time.Now)
	return out.String(), errOut.String(), code
}

// TestVerifyTakesAMatchAtTheHubsCurrentPosition: a Digest answered at the
// hub's current position (moved) that matches the copy is a proof.
func TestVerifyTakesAMatchAtTheHubsCurrentPosition(t *testing.T) {
	var d hubclient.Digest
	d.Add("demo", "a", "u1", "10")
	stdout, stderr, code := runVerify(t, &digestHub{digest: &informerhubv1.DigestResponse{Count: 1, Digest: d.String(), ResourceVersion: "15", Moved: true}})
	if want := "consistent at resourceVersion 15: 1 objects, digest " + d.String() + "\n"; code != 0 || stdout != want {
		t.Errorf("exit %d, %q (stderr %q); want 0, %q", code, stdout, stderr, want)
	}
}

// TestVerifyExitsOneOnAMismatch: a digest that differs prints both sides
// and exits 1.
func TestVerifyExitsOneOnAMismatch(t *testing.T) {
	stdout, stderr, code := runVerify(t, &digestHub{digest: &informerhubv1.DigestResponse{Count: 2, Digest: "00000000000000000000000000000001", ResourceVersion: "10"}})
	if code != 1 || !strings.HasPrefix(stdout, "MISMATCH at resourceVersion 10: the hub has 2 objects of digest 00000000000000000000000000000001; hubctl holds 1 of digest ") ||
		!strings.Contains(stderr, "differs") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1 and both sides", code, stdout, stderr)
	}
}
