package informerhub_test

import (
	"errors"
	"testing"
	"time"

	. "github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

func TestStatsCountWhatHappens(t *testing.T) {
	fx := newResumeFixture(t, Config{HistorySize: 8, QueueSize: 4})
	c, h, ctx, sel := fx.c, fx.h, fx.ctx, fx.sel
	stalled, err := h.Watch(ctx, WatchRequest{Selector: sel}) // live, never read
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()

	fx.add("ns", 3) // rv 2..4, each read by the fixture's live subscriber
	st := statsOf(t, h)
	if !st.InformerActive || st.Subscribers != 2 || st.CachedObjects != 4 {
		t.Fatalf("levels: active %v, %d subscribers, %d objects; want active, 2, 4", st.InformerActive, st.Subscribers, st.CachedObjects)
	}
	if st.InformerStarts != 1 || st.WatchRestarts != 0 {
		t.Fatalf("%d informer starts, %d watch restarts; want 1 and 0", st.InformerStarts, st.WatchRestarts)
	}
	if st.QueuePeak != 3 {
		t.Fatalf("queue peak %d, want 3: the stalled subscriber's", st.QueuePeak)
	}
	if st.HistoryEvents != 3 || st.HistoryOldest.IsZero() || st.HistoryNewest.Before(st.HistoryOldest) || time.Since(st.HistoryNewest) < 0 {
		t.Fatalf("history: %d events, oldest %v, newest %v", st.HistoryEvents, st.HistoryOldest, st.HistoryNewest)
	}

	fx.add("ns2", 7) // rv 5..11: the stalled subscriber falls behind at the fifth change; the history evicts rv 2 and 3
	if err := stalled.Err(); err != nil {
		t.Fatalf("stalled subscriber: %v; falling behind ends nobody", err)
	}
	// A change the informer's watch misses, then the fake's log is reset:
	// the watch ends, resuming it from before that change gets 410, and it
	// relists; so does a replay of the fixture's first token, which the
	// history no longer holds. (Without the missed change, the watch could
	// resume from the fake's newest version, and nothing would relist.)
	c.ConfigMaps().AddDropWatch(hubtest.ConfigMap("ns3", "0", nil, "")) // rv 12
	c.ConfigMaps().ResetWatch()
	if _, err := fx.live.Next(ctx); err != nil { // rv 12, the relist's difference
		t.Fatal(err)
	}
	resumed, err := h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: fx.start})
	if err == nil {
		_, err = resumed.Next(ctx)
		resumed.Close()
	}
	if !errors.Is(err, ErrTokenExpired) {
		t.Fatalf("resuming a token the API server no longer has: %v, want ErrTokenExpired", err)
	}

	st = statsOf(t, h)
	got := [...]uint64{st.InformerStarts, st.EventsReceived, st.EventsSent, st.FellBehind, st.SlowDisconnects, st.ExpiredTokens, st.Relists, st.Replays}
	if want := [...]uint64{1, 11, 11, 1, 0, 1, 1, 1}; got != want {
		t.Fatalf("starts, received, sent, fell behind, slow, expired, relists, replays = %v, want %v", got, want)
	}
	if st.WatchRestarts < 1 {
		t.Fatal("no upstream watch restart counted, want at least the one after the reset")
	}
	if st.QueuePeak != 4 {
		t.Fatalf("queue peak %d, want 4: the stalled subscriber's queue, full when it fell behind", st.QueuePeak)
	}
	if st.HistoryEvents != 8 {
		t.Fatalf("history holds %d events, want 8", st.HistoryEvents)
	}
}

// statsOf returns the hub's stats of ConfigMaps, its only resource type.
func statsOf(t *testing.T, h *Hub) ResourceStats {
	t.Helper()
	stats := h.Stats()
	if len(stats) != 1 || stats[0].Resource != hubtest.ConfigMaps {
		t.Fatalf("stats of %d resource types, want ConfigMaps only: %+v", len(stats), stats)
	}
	return stats[0]
}
