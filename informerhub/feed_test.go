package informerhub_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	. "github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
)

// TestTokensOfOtherFeedInstances forges tokens (export_test.go) to reach the
// cases a client cannot produce on demand: tokens of other feed instances at
// chosen positions.
func TestTokensOfOtherFeedInstances(t *testing.T) {
	c := hubtest.NewCluster(t)
	for i := range 3 {
		c.ConfigMaps().Add(hubtest.ConfigMap("ns", fmt.Sprint(i), nil, "")) // rv 1..3
	}
	h := New(Config{HistorySize: 4, Logger: slog.New(slog.DiscardHandler)}, c, c)
	defer h.Close()
	ctx := context.Background()
	sel := Selector{Resource: hubtest.ConfigMaps}
	live, err := h.Watch(ctx, WatchRequest{Selector: sel}) // the list is at rv 3
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	for i := range 6 {
		c.ConfigMaps().Modify(hubtest.ConfigMap("ns", "0", nil, fmt.Sprint(i))) // rv 4..9
		if _, err := live.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The history holds the records of rv 6..9; its floor is rv 5.

	other := uint64(12345) // an epoch no feed has
	tests := []struct {
		name    string
		rv      uint64
		offset  uint32
		wantErr error
		wantRVs []string // the first events after resuming
	}{
		{"inside the history", 7, 0, nil, []string{"8", "9"}},
		{"at the floor", 5, 0, nil, []string{"6", "7"}},
		{"below the floor", 4, 0, ErrTokenExpired, nil},
		{"inside another instance's relist", 7, 2, ErrTokenExpired, nil},
		{"ahead of the hub", 10, 0, ErrTokenAhead, nil},
		{"at the hub's position", 9, 0, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := ForgeToken("configmaps.v1", other, 0, tt.rv, tt.offset)
			s, err := h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: tok})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Watch: %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			defer s.Close()
			for _, want := range tt.wantRVs {
				ev, err := s.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if ev.ResourceVersion != want {
					t.Fatalf("event at rv %s, want %s", ev.ResourceVersion, want)
				}
			}
		})
	}
}

func TestHistoryOvertakesACatchingUpSubscriber(t *testing.T) {
	c := hubtest.NewCluster(t)
	h := New(Config{HistorySize: 300, QueueSize: 1000, Logger: slog.New(slog.DiscardHandler)}, c, c)
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sel := Selector{Resource: hubtest.ConfigMaps}
	live, err := h.Watch(ctx, WatchRequest{Selector: sel})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	start := live.ResumeToken()
	for i := range 290 {
		c.ConfigMaps().Add(hubtest.ConfigMap("ns", fmt.Sprint(i), nil, ""))
		if _, err := live.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	late, err := h.Watch(ctx, WatchRequest{Selector: sel, ResumeToken: start})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	// It reads its first batch of the history (256 records); then 300
	// more changes push the rest of what it needs out of the history.
	first, err := late.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		c.ConfigMaps().Add(hubtest.ConfigMap("ns2", fmt.Sprint(i), nil, ""))
		if _, err := live.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var tooSlow *TooSlowError
	for {
		_, err := late.Next(ctx)
		if err == nil {
			continue
		}
		if !errors.As(err, &tooSlow) {
			t.Fatalf("Next: %v, want a TooSlowError", err)
		}
		break
	}
	if tooSlow.ResumeToken == first.ResumeToken || tooSlow.ResumeToken == start {
		t.Fatal("the error does not carry the last token delivered")
	}
}

func TestClosingTheHubEndsSubscriptions(t *testing.T) {
	c := hubtest.NewCluster(t)
	h := New(Config{Logger: slog.New(slog.DiscardHandler)}, c, c)
	ctx := context.Background()
	s, err := h.Watch(ctx, WatchRequest{Selector: Selector{Resource: hubtest.ConfigMaps}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h.Close()
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done was not closed")
	}
	if _, err := s.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
	if _, err := h.Watch(ctx, WatchRequest{Selector: Selector{Resource: hubtest.ConfigMaps}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Watch after Close: %v, want ErrClosed", err)
	}
}
