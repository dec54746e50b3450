package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"k8s.io/client-go/rest"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/internal/testhub"
	"github.com/informerhub/informerhub/server"
	"github.com/informerhub/informerhub/test/checker"
)

// hubConfig is the hub of the path tests: a history large enough for
// every scenario, queues of four changes (a reader that stops falls behind
// after a few), bookmarks every 100 ms (a quiet stream gets some within a
// test's patience), Snapshot pages of three objects, and replays that wait
// for no slot (every probe is one anonymous owner, and some readers stop
// with theirs).
func hubConfig() informerhub.Config {
	return informerhub.Config{HistorySize: 4096, QueueSize: 4, BookmarkInterval: 100 * time.Millisecond, SnapshotPageSize: 3,
		MaxConcurrentReplays: 100, MaxReplaysPerOwner: 100}
}

// serverConfig ends no stream for a reader that stopped: the path tests
// stop readers on purpose.
func serverConfig() server.Config {
	return server.Config{MaxSendStall: 10 * time.Minute, StalledSendGrace: 100 * time.Millisecond}
}

// startHub runs a hub against the API server restConfig reaches.
func startHub(t *testing.T, restConfig *rest.Config, cfg informerhub.Config) *testhub.Served {
	t.Helper()
	return testhub.Serve(t, restConfig, cfg, serverConfig())
}

// dialer makes a client of a hub, on a connection of its own.
type dialer func(t *testing.T, addr string) informerhubv1.InformerHubServiceClient

// grpcDialer dials with gRPC's smallest windows (64 KiB, which turns off
// its window growth): a client that stops reading stops the hub's sends
// after a few large events.
func grpcDialer(t *testing.T, addr string) informerhubv1.InformerHubServiceClient {
	return informerhubv1.NewInformerHubServiceClient(testhub.Dial(t, addr,
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20))))
}

// probeRun is one probe's streams in a path test: each segment a Watch,
// read in the background into a transcript, which the test can pause,
// cut and resume.
type probeRun struct {
	t      *testing.T
	p      probe
	s      *scenario
	req    *informerhubv1.WatchRequest
	client informerhubv1.InformerHubServiceClient
	// ctx is what the streams' contexts derive from: its metadata (a
	// bearer token) goes with each call.
	ctx context.Context
	tr  *checker.Transcript
	// from is the resourceVersion the first segment starts from, when it
	// has no initial events: a Snapshot's. initial is set when it has.
	from    string
	initial bool

	mu sync.Mutex // guards the fields below
	// cancel ends the current stream; done is closed when its reader
	// has returned, with err why the stream ended.
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	// paused holds the reader before its next Recv until it is closed.
	paused chan struct{}
	// bookmark is the highest resourceVersion of a bookmark of the
	// current stream; events counts its events (bookmarks included).
	bookmark uint64
	events   int
	changed  chan struct{} // closed and replaced when the above change
}

func newProbeRun(t *testing.T, s *scenario, p probe, client informerhubv1.InformerHubServiceClient) *probeRun {
	return &probeRun{t: t, p: p, s: s, req: p.request(s), client: client, ctx: context.Background(), tr: &checker.Transcript{}, changed: make(chan struct{})}
}

// open starts a stream: from token, with initial events if initial.
func (r *probeRun) open(token string, initial bool) {
	r.t.Helper()
	req := cloneRequest(r.req)
	req.ResumeToken, req.SendInitialEvents = token, initial
	ctx, cancel := context.WithCancel(r.ctx)
	stream, err := r.client.Watch(ctx, req)
	if err != nil {
		cancel()
		r.t.Fatalf("%s: Watch: %v", r.p.row, err)
	}
	r.tr.Open(token)
	if r.tr.Segments() == 1 {
		r.initial = initial
	}
	r.mu.Lock()
	r.cancel, r.done, r.err, r.bookmark, r.events = cancel, make(chan struct{}), nil, 0, 0
	done := r.done
	r.mu.Unlock()
	go r.read(stream, done)
}

func cloneRequest(req *informerhubv1.WatchRequest) *informerhubv1.WatchRequest {
	b, _ := protojson.Marshal(req)
	out := &informerhubv1.WatchRequest{}
	_ = protojson.Unmarshal(b, out)
	return out
}

func (r *probeRun) read(stream grpc.ServerStreamingClient[informerhubv1.WatchResponse], done chan struct{}) {
	defer close(done)
	for {
		r.mu.Lock()
		paused := r.paused
		r.mu.Unlock()
		if paused != nil {
			select {
			case <-paused:
			case <-stream.Context().Done():
			}
		}
		resp, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			r.tr.Close(err)
			r.mu.Lock()
			r.err = err
			r.notifyLocked()
			r.mu.Unlock()
			return
		}
		e, err := checker.FromWatchResponse(resp)
		if err != nil {
			r.tr.Close(err)
			r.mu.Lock()
			r.err = err
			r.notifyLocked()
			r.mu.Unlock()
			return
		}
		r.tr.Record(e)
		r.mu.Lock()
		r.events++
		if e.Type == checker.Bookmark {
			v, _ := strconv.ParseUint(e.ResourceVersion, 10, 64)
			r.bookmark = max(r.bookmark, v)
		}
		r.notifyLocked()
		r.mu.Unlock()
	}
}

func (r *probeRun) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// pause stops the reader before its next Recv: the stream's buffers fill,
// and the hub's sends to it block.
func (r *probeRun) pause() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paused = make(chan struct{})
}

// resume lets a paused reader read on.
func (r *probeRun) resume() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.paused != nil {
		close(r.paused)
		r.paused = nil
	}
}

// cut ends the current stream, as a client that goes away does, and waits
// for its reader.
func (r *probeRun) cut() {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	cancel()
	r.resume()
	<-done
}

// resumeFromLast cuts the stream and opens the next from the last token
// received.
func (r *probeRun) resumeFromLast() {
	r.t.Helper()
	r.cut()
	r.open(r.tr.LastToken(), false)
}

// await waits until cond holds of the current stream's events
// (bookmarks included) and highest bookmark, failing the test if the
// stream ends first, or after a generous bound.
func (r *probeRun) await(what string, cond func(events int, bookmark uint64) bool) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		r.mu.Lock()
		events, bookmark, err, changed, done := r.events, r.bookmark, r.err, r.changed, r.done
		r.mu.Unlock()
		if cond(events, bookmark) {
			return
		}
		select {
		case <-done:
			r.t.Fatalf("%s: the stream ended (%v) before %s", r.p.row, err, what)
		default:
		}
		select {
		case <-changed:
		case <-ctx.Done():
			r.t.Fatalf("%s: not %s after a minute (events %d, bookmark at %d)", r.p.row, what, events, bookmark)
		}
	}
}

// awaitEnd waits until the current stream has ended, and returns why.
func (r *probeRun) awaitEnd() error {
	r.t.Helper()
	r.mu.Lock()
	done := r.done
	r.mu.Unlock()
	select {
	case <-done:
	case <-time.After(time.Minute):
		r.t.Fatalf("%s: the stream has not ended after a minute", r.p.row)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// awaitEvents waits for n events of the current stream.
func (r *probeRun) awaitEvents(n int) {
	r.t.Helper()
	r.await(fmt.Sprintf("%d events", n), func(events int, _ uint64) bool { return events >= n })
}

// settled waits until the stream has had a bookmark at the version of its
// kind's last change, or later: the hub says it has sent it everything up
// to there.
func (r *probeRun) settled() {
	r.t.Helper()
	last := r.s.lastRV[r.p.kind]
	r.await(fmt.Sprintf("a bookmark at resourceVersion %d", last), func(_ int, bookmark uint64) bool { return bookmark >= last })
}

// reachOf is the highest resourceVersion a transcript holds.
func reachOf(tr *checker.Transcript) uint64 {
	var v uint64
	for _, e := range tr.Events() {
		rv, _ := strconv.ParseUint(e.ResourceVersion, 10, 64)
		v = max(v, rv)
	}
	return v
}

// check compares the transcript as it is (its stream may go on) with the
// reference of the probe's kind, and, where the API server's LIST is an
// oracle of the state, with that.
func (r *probeRun) check(opts checker.Options) {
	r.t.Helper()
	tr := r.tr.Copy()
	r.s.reach(r.t, r.p.kind, reachOf(tr))
	base := r.p.options(r.s)
	base.InitialEvents, base.Relisted, base.FromResourceVersion = opts.InitialEvents, opts.Relisted, opts.FromResourceVersion
	if err := checker.Check(r.s.refs[r.p.kind], tr, base); err != nil {
		r.t.Errorf("%s: %v", r.p.row, err)
	}
	if r.p.listable && !opts.Relisted {
		if err := checker.CheckState(context.Background(), dyn, r.p.kind.gvr, tr, base); err != nil {
			r.t.Errorf("%s, against the API server's LIST: %v", r.p.row, err)
		}
	}
}

// snapshotEvents reads a whole Snapshot of the probe's selection, and returns it
// as initial events and the bookmark that ends them, at its token.
func snapshotEvents(t *testing.T, ctx context.Context, client informerhubv1.InformerHubServiceClient, w *informerhubv1.WatchRequest) (events []checker.Event, token, rv string) {
	t.Helper()
	stream, err := client.Snapshot(ctx, &informerhubv1.SnapshotRequest{Selector: w.GetSelector(), Fields: w.GetFields(), ObjectFormat: w.GetObjectFormat()})
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	for {
		page, err := stream.Recv()
		if err != nil {
			t.Fatalf("Snapshot: %v", err)
		}
		if token != "" && (page.GetResumeToken() != token || page.GetResourceVersion() != rv) {
			t.Fatalf("Snapshot pages of two points in time: %s at %s, then %s at %s", token, rv, page.GetResumeToken(), page.GetResourceVersion())
		}
		token, rv = page.GetResumeToken(), page.GetResourceVersion()
		objects := page.GetObjects()
		if structs := page.GetObjectStructs(); len(structs) > 0 {
			objects = nil
			for _, s := range structs {
				b, err := protojson.Marshal(s)
				if err != nil {
					t.Fatal(err)
				}
				objects = append(objects, string(b))
			}
		}
		for i, obj := range objects {
			resp := &informerhubv1.WatchResponse{Type: informerhubv1.EventType_EVENT_TYPE_ADDED, Object: obj, ResumeToken: token}
			if errs := page.GetFilterErrors(); len(errs) > 0 {
				resp.FilterError = errs[i]
			}
			e, err := checker.FromWatchResponse(withResourceVersion(t, resp))
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, e)
		}
		if page.GetLast() {
			break
		}
	}
	end, err := checker.FromWatchResponse(&informerhubv1.WatchResponse{Type: informerhubv1.EventType_EVENT_TYPE_BOOKMARK,
		ResourceVersion: rv, ResumeToken: token, InitialEventsEnd: true})
	if err != nil {
		t.Fatal(err)
	}
	return append(events, end), token, rv
}

// withResourceVersion sets a response's resource_version to its object's,
// as a Watch sends it.
func withResourceVersion(t *testing.T, resp *informerhubv1.WatchResponse) *informerhubv1.WatchResponse {
	t.Helper()
	var obj struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := jsonUnmarshal(resp.GetObject(), &obj); err != nil {
		t.Fatalf("a Snapshot object: %v", err)
	}
	resp.ResourceVersion = obj.Metadata.ResourceVersion
	return resp
}

// statusOf is the gRPC status of err, for messages.
func statusOf(err error) string {
	st, _ := status.FromError(err)
	if st.Code() == codes.OK {
		return "OK"
	}
	return st.Code().String() + ": " + st.Message()
}
