package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

// TestTheREADMEsWatchOutputIsHubctls: the README's sample of `hubctl watch
// cm -n demo` (the block after its hubctl commands) is what hubctl prints
// for the events it shows, to the space: its initial ADDEDs, then each
// change at once, and on Ctrl-C the resume token. (It was taken from a
// real run; this keeps it true when the table changes.)
func TestTheREADMEsWatchOutputIsHubctls(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	sample := readmeWatchSample(t, string(readme))
	rows, rest, ok := strings.Cut(sample, "^C\n")
	if !ok || !strings.HasPrefix(rest, "resume with: --resume-token ") {
		t.Fatalf("the README's sample does not end with ^C and the resume token:\n%s", sample)
	}

	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var stdout, stderr bytes.Buffer
	p := eventPrinter{printer: &printer{stdout: &stdout, stderr: &stderr, now: func() time.Time { return now }}, namespace: "demo", batching: true}
	lines := strings.Split(strings.TrimSuffix(rows, "\n"), "\n")
	if len(lines) < 3 || strings.Join(strings.Fields(lines[0]), " ") != "EVENT NAME RESOURCEVERSION AGE" {
		t.Fatalf("the README's sample has no watch table of `hubctl watch cm -n demo`:\n%s", sample)
	}
	initial := true
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("a row of the README's sample is not EVENT NAME RESOURCEVERSION AGE: %q", line)
		}
		age, err := time.ParseDuration(f[3])
		if err != nil {
			t.Fatalf("the age of %q: %v", line, err)
		}
		e := hubclient.Event{Type: hubclient.EventType(f[0]), ResourceVersion: f[2],
			Object: fmt.Appendf(nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"demo","resourceVersion":%q,"creationTimestamp":%q}}`,
				f[1], f[2], now.Add(-age).Format(time.RFC3339))}
		if initial && e.Type != hubclient.Added {
			initial = false
			if err := p.print(hubclient.Event{Type: hubclient.Bookmark, InitialEventsEnd: true}, "", "t", true); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.print(e, "", "t", false); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(rows, stdout.String()); diff != "" {
		t.Errorf("README.md's sample output differs from what hubctl prints (-README +hubctl):\n%s", diff)
	}
}

// readmeWatchSample is the code block that follows the README's block of
// hubctl commands (the one with alias hubctl=).
func readmeWatchSample(t *testing.T, readme string) string {
	t.Helper()
	_, after, ok := strings.Cut(readme, "\nalias hubctl=")
	if !ok {
		t.Fatal("README.md has no block with alias hubctl=")
	}
	_, after, ok = strings.Cut(after, "\n```\n") // the end of the commands
	if ok {
		_, after, ok = strings.Cut(after, "```\n") // the sample's start
	}
	sample, _, closed := strings.Cut(after, "\n```")
	if !ok || !closed {
		t.Fatal("README.md has no code block after its hubctl commands")
	}
	return sample + "\n"
}
