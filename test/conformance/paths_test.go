package conformance

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/internal/testhub"
	"github.com/informerhub/informerhub/test/checker"
)

// statsOf is a hub's statistics of one resource type.
func statsOf(t *testing.T, h *informerhub.Hub, k *kind) informerhub.ResourceStats {
	t.Helper()
	return statsOfGVR(h, k.gvr)
}

func statsOfGVR(h *informerhub.Hub, gvr schema.GroupVersionResource) informerhub.ResourceStats {
	for _, st := range h.Stats() {
		if st.Resource == gvr {
			return st
		}
	}
	return informerhub.ResourceStats{Resource: gvr}
}

// statsAll is statsOf for every kind.
func statsAll(t *testing.T, h *informerhub.Hub) map[*kind]informerhub.ResourceStats {
	t.Helper()
	out := map[*kind]informerhub.ResourceStats{}
	for _, k := range kinds {
		out[k] = statsOf(t, h, k)
	}
	return out
}

// probesByKind counts the runs of each kind; with selecting, only those
// that select something: the streams a path can make fall behind, or
// catch up past its history.
func probesByKind(runs []*probeRun, selecting bool) map[*kind]uint64 {
	out := map[*kind]uint64{}
	for _, r := range runs {
		if !selecting || !r.p.quiet {
			out[r.p.kind]++
		}
	}
	return out
}

// atSnapshots makes a run of every probe of column c, each on a
// connection of its own, and takes a Snapshot for each: the transcripts
// start at the Snapshots' versions, and the tokens it returns open them.
func atSnapshots(t *testing.T, s *scenario, h *testhub.Served, c column, dial dialer) ([]*probeRun, map[*probeRun]string) {
	t.Helper()
	var runs []*probeRun
	tokens := map[*probeRun]string{}
	for _, p := range probesFor(c) {
		r := newProbeRun(t, s, p, dial(t, h.Addr))
		_, tokens[r], r.from = snapshotEvents(t, r.ctx, r.client, r.req)
		runs = append(runs, r)
	}
	return runs, tokens
}

// fromSnapshots opens every probe of column c at the head of h's history,
// from a Snapshot's token (or with initial events, for a probe of them),
// each on a connection of its own.
func fromSnapshots(t *testing.T, s *scenario, h *testhub.Served, c column, dial dialer) []*probeRun {
	t.Helper()
	var runs []*probeRun
	for _, p := range probesFor(c) {
		r := newProbeRun(t, s, p, dial(t, h.Addr))
		if p.initial {
			r.open("", true)
		} else {
			_, token, rv := snapshotEvents(t, r.ctx, r.client, r.req)
			r.from = rv
			r.open(token, false)
		}
		runs = append(runs, r)
	}
	return runs
}

// settleAll waits until the scenario's last changes have reached every
// run that selects them.
func settleAll(s *scenario, runs []*probeRun) {
	s.settle()
	for _, r := range runs {
		r.settled()
	}
}

// wantReplays fails t unless each of the runs (with selecting, each that
// selects something) replayed at least once between the statistics before
// and after.
func wantReplays(t *testing.T, runs []*probeRun, selecting bool, before, after map[*kind]informerhub.ResourceStats) {
	t.Helper()
	for k, n := range probesByKind(runs, selecting) {
		if replays := after[k].Replays - before[k].Replays; replays < n {
			t.Errorf("%s: %d replays of %d streams, want one each at least", k.gvr.Resource, replays, n)
		}
	}
}

// checkAll checks every run in a subtest of its row, which passes the
// row's cell of column c if it passes.
func checkAll(t *testing.T, runs []*probeRun, c column, opts checker.Options) {
	t.Helper()
	for _, r := range runs {
		t.Run(string(r.p.row), func(t *testing.T) {
			passIfOK(t, r.p.row, c)
			r.t = t
			o := opts
			o.InitialEvents = o.InitialEvents || r.initial
			if o.FromResourceVersion == "" && !o.InitialEvents {
				o.FromResourceVersion = r.from
			}
			r.check(o)
		})
	}
}

// TestLive: streams from a Snapshot's token join the live subscribers at
// once; each is cut mid-way and resumed from its last token (a bookmark's,
// for the probe that gets nothing else).
func TestLive(t *testing.T) {
	s := newScenario(t, smallPayload)
	h := startHub(t, cluster.Config, hubConfig())
	runs := fromSnapshots(t, s, h, colLive, grpcDialer)
	before := statsAll(t, h.Hub)
	s.churn(2)
	for _, r := range runs {
		r.awaitEvents(1)
		r.resumeFromLast()
	}
	s.churn(2)
	settleAll(s, runs)
	for k, st := range statsAll(t, h.Hub) {
		if st.Replays != before[k].Replays || st.FellBehind != before[k].FellBehind {
			t.Errorf("%s: %d replays and %d falls behind, want none: the streams were to stay live", k.gvr.Resource,
				st.Replays-before[k].Replays, st.FellBehind-before[k].FellBehind)
		}
	}
	checkAll(t, runs, colLive, checker.Options{})
}

// TestInitialEvents: streams with initial events, each cut after its
// first initial event and resumed with that event's token, which continues
// the initial events; then changes.
func TestInitialEvents(t *testing.T) {
	s := newScenario(t, smallPayload)
	h := startHub(t, cluster.Config, hubConfig())
	var runs []*probeRun
	for _, p := range probesFor(colInitial) {
		r := newProbeRun(t, s, p, grpcDialer(t, h.Addr))
		r.open("", true)
		runs = append(runs, r)
	}
	for _, r := range runs {
		r.awaitEvents(1)
		r.resumeFromLast()
	}
	s.churn(2)
	settleAll(s, runs)
	checkAll(t, runs, colInitial, checker.Options{InitialEvents: true})
}

// TestSnapshot: a Snapshot in pages of three, then a Watch from its token.
func TestSnapshot(t *testing.T) {
	s := newScenario(t, smallPayload)
	h := startHub(t, cluster.Config, hubConfig())
	var runs []*probeRun
	for _, p := range probesFor(colSnapshot) {
		r := newProbeRun(t, s, p, grpcDialer(t, h.Addr))
		events, token, _ := snapshotEvents(t, r.ctx, r.client, r.req)
		for _, e := range events {
			r.tr.Record(e)
		}
		r.open(token, false)
		runs = append(runs, r)
	}
	s.churn(2)
	settleAll(s, runs)
	checkAll(t, runs, colSnapshot, checker.Options{InitialEvents: true})
}

// TestCatchUpFromMemory: live streams whose readers stop while changes
// come fall behind (their queues hold four changes), then read on from the
// history in memory, and join the live subscribers again.
func TestCatchUpFromMemory(t *testing.T) {
	s := newScenario(t, largePayload)
	h := startHub(t, cluster.Config, hubConfig())
	runs := fromSnapshots(t, s, h, colCatchUpMemory, grpcDialer)
	for _, r := range runs {
		r.pause()
	}
	before := statsAll(t, h.Hub)
	s.churn(4)
	for _, r := range runs {
		r.resume()
	}
	settleAll(s, runs)
	after := statsAll(t, h.Hub)
	for k, n := range probesByKind(runs, true) {
		if fell := after[k].FellBehind - before[k].FellBehind; fell < n || after[k].Replays != before[k].Replays {
			t.Errorf("%s: %d streams fell behind %d times, and %d replayed: want each to have fallen behind, none to replay",
				k.gvr.Resource, n, fell, after[k].Replays-before[k].Replays)
		}
	}
	checkAll(t, runs, colCatchUpMemory, checker.Options{})
}

// TestReplayAtResume: tokens older than a history of 32 changes are
// replayed from the API server, then join the history.
func TestReplayAtResume(t *testing.T) {
	s := newScenario(t, smallPayload)
	cfg := hubConfig()
	cfg.HistorySize = 32
	h := startHub(t, cluster.Config, cfg)
	runs, tokens := atSnapshots(t, s, h, colReplayResume, grpcDialer)
	s.churn(3) // 36 changes of each kind, and deletes
	before := statsAll(t, h.Hub)
	for _, r := range runs {
		r.open(tokens[r], false)
	}
	s.churn(1)
	settleAll(s, runs)
	after := statsAll(t, h.Hub)
	wantReplays(t, runs, false, before, after)
	checkAll(t, runs, colReplayResume, checker.Options{})
}

// TestReplayOnAnotherReplica: tokens of one hub, resumed on another
// started after them (as a client fails over, or its hub restarts without
// a disk history), are replayed from the API server: the resourceVersions
// they carry are the cluster's.
func TestReplayOnAnotherReplica(t *testing.T) {
	s := newScenario(t, smallPayload)
	first := startHub(t, cluster.Config, hubConfig())
	runs, tokens := atSnapshots(t, s, first, colReplayReplica, grpcDialer)
	s.churn(2)
	first.Stop()
	second := startHub(t, cluster.Config, hubConfig())
	for _, r := range runs {
		r.client = grpcDialer(t, second.Addr)
		r.open(tokens[r], false)
	}
	s.churn(1)
	settleAll(s, runs)
	wantReplays(t, runs, false, nil, statsAll(t, second.Hub))
	checkAll(t, runs, colReplayReplica, checker.Options{})
}

// TestReplayMidStream: streams catching up from tokens the history holds,
// whose readers stop after one event while more changes than the history
// holds come: the history moves past them mid-stream, and they go on
// from the API server, then join the history again.
func TestReplayMidStream(t *testing.T) {
	s := newScenario(t, largePayload)
	cfg := hubConfig()
	cfg.HistorySize = 64
	h := startHub(t, cluster.Config, cfg)
	runs, tokens := atSnapshots(t, s, h, colReplayMid, grpcDialer)
	s.churn(3) // 36 changes of each kind: the history holds them
	before := statsAll(t, h.Hub)
	for _, r := range runs {
		r.open(tokens[r], false)
		r.awaitEvents(1)
		r.pause()
	}
	s.churn(8) // 96 more: the history no longer holds where they are
	for _, r := range runs {
		r.resume()
	}
	settleAll(s, runs)
	after := statsAll(t, h.Hub)
	// A stream that selects nothing has caught up before its reader
	// stops: it has nothing to replay.
	wantReplays(t, runs, true, before, after)
	checkAll(t, runs, colReplayMid, checker.Options{})
}
