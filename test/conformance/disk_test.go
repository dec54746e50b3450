package conformance

import (
	"context"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage/value"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/historystore"
	"github.com/informerhub/informerhub/internal/testhub"
	"github.com/informerhub/informerhub/test/checker"
)

// slowDisk is the disk history's transformers: values as they are, each
// read taking a millisecond, as from a slow disk. A catch-up from it lasts
// longer than the disk hub's bookmark interval.
type slowDisk struct{}

func (slowDisk) TransformerForResource(schema.GroupResource) value.Transformer { return slowDisk{} }

func (slowDisk) TransformFromStorage(_ context.Context, data []byte, _ value.Context) ([]byte, bool, error) {
	time.Sleep(time.Millisecond)
	return data, false, nil
}

func (slowDisk) TransformToStorage(_ context.Context, data []byte, _ value.Context) ([]byte, error) {
	return data, nil
}

// startDiskHub runs a hub with a disk history in a directory of the
// test's, which keeps 16 changes of each kind in memory, on a slow disk,
// with bookmarks every 10 ms; cfg's retention applies.
func startDiskHub(t *testing.T, cfg informerhub.Config) *testhub.Served {
	t.Helper()
	store, err := historystore.Open(historystore.Options{Dir: t.TempDir(), MemTableBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the hub's: cleanups run last first
		if err := store.Close(); err != nil {
			t.Error(err)
		}
	})
	base := hubConfig()
	cfg.HistoryStore, cfg.HistoryTransformers = store, slowDisk{}
	cfg.HistorySize, cfg.QueueSize, cfg.BookmarkInterval, cfg.SnapshotPageSize = 16, base.QueueSize, 10*time.Millisecond, base.SnapshotPageSize
	cfg.MaxConcurrentReplays, cfg.MaxReplaysPerOwner = base.MaxConcurrentReplays, base.MaxReplaysPerOwner
	return startHub(t, cluster.Config, cfg)
}

// written waits until the hub has written every change of every kind to
// its disk history.
func written(t *testing.T, h *informerhub.Hub) {
	t.Helper()
	eventually(t, "the disk history has every change", func() bool {
		for _, k := range kinds {
			if statsOf(t, h, k).DiskPending != 0 {
				return false
			}
		}
		return true
	})
}

// windows returns, per kind, where the hub's history in memory begins and
// where its retained history (memory and disk) does.
func windows(t *testing.T, client informerhubv1.InformerHubServiceClient) (memory, retained map[*kind]uint64) {
	t.Helper()
	resp, err := client.ListResources(context.Background(), &informerhubv1.ListResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	memory, retained = map[*kind]uint64{}, map[*kind]uint64{}
	for _, res := range resp.GetResources() {
		for _, k := range kinds {
			if res.GetGroup() == k.gvr.Group && res.GetVersion() == k.gvr.Version && res.GetResource() == k.gvr.Resource {
				memory[k], _ = strconv.ParseUint(res.GetHistoryResourceVersion(), 10, 64)
				retained[k], _ = strconv.ParseUint(res.GetRetainedResourceVersion(), 10, 64)
			}
		}
	}
	return memory, retained
}

// eventually polls cond until it holds, failing the test after a minute:
// for what the hub does on its own (write its disk, apply retention),
// which nothing announces.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not after a minute: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCatchUpFromDisk: tokens older than the history in memory, which the
// disk history holds, catch up from the disk, exactly, and get bookmarks
// while they read it: the probe that selects nothing gets one at a
// position inside the history it reads, before it reaches the head.
func TestCatchUpFromDisk(t *testing.T) {
	s := newScenario(t, smallPayload)
	h := startDiskHub(t, informerhub.Config{})
	runs, tokens := atSnapshots(t, s, h, colCatchUpDisk, grpcDialer)
	s.churn(4) // 48 changes of each kind: past the 16 in memory
	written(t, h.Hub)
	memory, _ := windows(t, h.Client)
	head := s.lastRV[kindConfigMaps]
	before := statsAll(t, h.Hub)
	for _, r := range runs {
		if from, _ := strconv.ParseUint(r.from, 10, 64); memory[r.p.kind] <= from {
			t.Fatalf("%s: the memory's history begins at %d, not after the token's version %s", r.p.row, memory[r.p.kind], r.from)
		}
		r.open(tokens[r], false)
	}
	for _, r := range runs {
		if r.p.row != rowBookmarks {
			continue
		}
		r.awaitEvents(1)
		first := r.tr.Events()[0]
		if v, _ := strconv.ParseUint(first.ResourceVersion, 10, 64); first.Type != checker.Bookmark || v >= head {
			t.Errorf("the first response of a stream that selects nothing, catching up from the disk: %s at %s, want a bookmark before the head (%d)",
				first.Type, first.ResourceVersion, head)
		}
	}
	settleAll(s, runs)
	after := statsAll(t, h.Hub)
	for k := range probesByKind(runs, false) {
		if after[k].Replays != before[k].Replays {
			t.Errorf("%s: %d replays, want none: the disk holds the tokens", k.gvr.Resource, after[k].Replays-before[k].Replays)
		}
	}
	checkAll(t, runs, colCatchUpDisk, checker.Options{})
}

// TestReplayAfterARetentionCut: streams catching up from the disk, whose
// readers stop after an event while retention deletes what they read,
// go on from the API server, exactly.
func TestReplayAfterARetentionCut(t *testing.T) {
	s := newScenario(t, largePayload)
	// Retention long enough that the changes are still on the disk when
	// the streams begin to read them on a loaded machine.
	h := startDiskHub(t, informerhub.Config{HistoryRetention: 15 * time.Second, HistoryRetentionCheck: 100 * time.Millisecond})
	runs, tokens := atSnapshots(t, s, h, colReplayCut, grpcDialer)
	s.churn(3) // past the 16 in memory
	written(t, h.Hub)
	before := statsAll(t, h.Hub)
	_, retained := windows(t, h.Client)
	for _, r := range runs {
		if from, _ := strconv.ParseUint(r.from, 10, 64); retained[r.p.kind] > from {
			t.Fatalf("%s: retention cut before the streams began to read the disk (retained from %d, token at %s): the machine is slower than the test's retention",
				r.p.row, retained[r.p.kind], r.from)
		}
	}
	for _, r := range runs {
		r.open(tokens[r], false)
		// A change, not a bookmark: its catch-up has begun on the disk.
		r.await("a change", func(int, uint64) bool {
			for _, e := range r.tr.Events() {
				if e.Type != checker.Bookmark {
					return true
				}
			}
			return r.p.quiet
		})
		r.pause()
	}
	// The streams read changes older than the memory's window, which the
	// disk holds until retention deletes every change before that window.
	eventually(t, "retention has deleted the changes the streams were reading", func() bool {
		memory, retained := windows(t, h.Client)
		for _, k := range kinds {
			if retained[k] < memory[k] {
				return false
			}
		}
		return true
	})
	for _, r := range runs {
		r.resume()
	}
	settleAll(s, runs)
	// Each stream read on the disk, which no longer holds where it was:
	// each replays, one that joins the history on the disk again perhaps
	// twice.
	after := statsAll(t, h.Hub)
	wantReplays(t, runs, true, before, after)
	checkAll(t, runs, colReplayCut, checker.Options{})
}

// TestRelist: a hub on an API server without a watch cache, stopped while
// objects change and etcd is compacted, gets 410 Gone when it watches
// again, and relists: its streams receive the differences, marked
// from_relist, each a true difference and a state the object had.
func TestRelist(t *testing.T) {
	s := newScenario(t, smallPayload)
	apiserver := etcdAPIServer(t)
	h := startHub(t, apiserver.Config, hubConfig())
	runs := fromSnapshots(t, s, h, colRelist, grpcDialer)
	s.churn(1)
	before := statsAll(t, h.Hub)
	if err := apiserver.Kill(); err != nil {
		t.Fatal(err)
	}
	s.churn(2)
	if _, err := cluster.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := apiserver.Start(); err != nil {
		t.Fatal(err)
	}
	settleAll(s, runs)
	after := statsAll(t, h.Hub)
	for _, k := range kinds {
		if after[k].Relists == before[k].Relists {
			t.Errorf("%s: no relist", k.gvr.Resource)
		}
	}
	for _, r := range runs {
		relisted := false
		for _, e := range r.tr.Events() {
			relisted = relisted || e.FromRelist
		}
		if !relisted && !r.p.quiet {
			t.Errorf("%s: no event marked from_relist", r.p.row)
		}
	}
	checkAll(t, runs, colRelist, checker.Options{Relisted: true})
}
