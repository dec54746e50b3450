package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// announcement is a message for a person, printed once the command is
// ready to be used: `make run`'s hints, which would fail with "connection
// refused" if printed while the hub still starts.
type announcement struct {
	url     string // the command's readiness probe; "": announce nothing
	message string
	out     io.Writer
}

// readyPoll is how often whenReady asks the probe: often enough that the
// hints follow readiness at once, rarely enough to cost nothing.
const readyPoll = 250 * time.Millisecond

// whenReady polls the probe until it answers 200 OK, then prints the
// message; it returns then, or when ctx is done (the command exited).
func (a announcement) whenReady(ctx context.Context, log *slog.Logger) {
	if a.url == "" {
		return
	}
	client := &http.Client{Timeout: 2 * time.Second}
	ticker := time.NewTicker(readyPoll)
	defer ticker.Stop()
	for {
		if ready(ctx, client, a.url) {
			log.Info("ready", "url", a.url)
			fmt.Fprintf(a.out, "\n%s\n\n", a.message)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// ready says whether url answers 200 OK now.
func ready(ctx context.Context, client *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
