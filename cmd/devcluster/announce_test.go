package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestHintsFollowReadiness: the message is printed once, after the probe
// has said 200 OK, not while it says 503.
func TestHintsFollowReadiness(t *testing.T) {
	var asked atomic.Int32
	probe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if asked.Add(1) < 3 {
			http.Error(w, "informers not synced", http.StatusServiceUnavailable)
		}
	}))
	defer probe.Close()
	var out strings.Builder
	a := announcement{url: probe.URL, message: "grpcurl -plaintext 127.0.0.1:8080 list", out: &out}
	a.whenReady(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if n := asked.Load(); n != 3 {
		t.Errorf("the probe was asked %d times; want 3 (twice not ready, then ready)", n)
	}
	if got, want := out.String(), "\ngrpcurl -plaintext 127.0.0.1:8080 list\n\n"; got != want {
		t.Errorf("printed %q; want %q", got, want)
	}
}

// TestNoHintsForACommandThatNeverGotReady: when the command exits first
// (ctx done), nothing is printed.
func TestNoHintsForACommandThatNeverGotReady(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	probe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		cancel() // the command exits while still starting
		http.Error(w, "starting", http.StatusServiceUnavailable)
	}))
	defer probe.Close()
	var out strings.Builder
	announcement{url: probe.URL, message: "hints", out: &out}.whenReady(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if out.Len() != 0 {
		t.Errorf("printed %q for a command that never got ready", out.String())
	}
}
