package server

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// writesRecorder records each Write its handler's writer makes, and can
// fail them.
type writesRecorder struct {
	*httptest.ResponseRecorder
	writes  [][]byte
	fail    error
	flushes int
}

func (w *writesRecorder) Write(p []byte) (int, error) {
	if w.fail != nil {
		return 0, w.fail
	}
	w.writes = append(w.writes, bytes.Clone(p))
	return w.ResponseRecorder.Write(p)
}

func (w *writesRecorder) Flush() { w.flushes++ }

func (w *writesRecorder) SetWriteDeadline(time.Time) error { return nil }

// TestEnvelopeWriterHandsOnEachMessageWhole: connect-go's two writes of a
// message (its 5-byte prefix, then its payload) reach net/http as one;
// an empty message's prefix goes at its Flush; larger writes pass as they
// are, and a payload past maxJoinBuffer follows its prefix alone.
func TestEnvelopeWriterHandsOnEachMessageWhole(t *testing.T) {
	rec := &writesRecorder{ResponseRecorder: httptest.NewRecorder()}
	w := &envelopeWriter{ResponseWriter: rec}
	for _, p := range []string{"\x00\x00\x00\x00\x03", "abc", "\x00\x00\x00\x00\x00"} {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	w.Flush()
	if _, err := w.Write([]byte("a payload written alone")); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", maxJoinBuffer)
	for _, p := range []string{"\x00\x00\x01\x00\x00", big} {
		if _, err := w.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"\x00\x00\x00\x00\x03abc", "\x00\x00\x00\x00\x00", "a payload written alone", "\x00\x00\x01\x00\x00", big}
	if len(rec.writes) != len(want) {
		t.Fatalf("writes %q, want %q", rec.writes, want)
	}
	for i := range want {
		if string(rec.writes[i]) != want[i] {
			t.Fatalf("write %d is %q, want %q", i, rec.writes[i], want[i])
		}
	}
	if rec.flushes != 1 {
		t.Fatalf("%d flushes, want 1", rec.flushes)
	}
	if got := rec.Body.String(); got != strings.Join(want, "") {
		t.Fatalf("body %q", got)
	}
	// http.ResponseController reaches the writer beneath.
	if err := http.NewResponseController(w).SetWriteDeadline(time.Now()); err != nil {
		t.Fatalf("SetWriteDeadline through the envelopeWriter: %v", err)
	}
}

// TestEnvelopeWriterReturnsTheWritesError: the error of the write that
// carries a held prefix is the payload's write's, as connect-go expects
// of a failed send; and a Flush with a prefix held reports its.
func TestEnvelopeWriterReturnsTheWritesError(t *testing.T) {
	reset := errors.New("stream reset")
	rec := &writesRecorder{ResponseRecorder: httptest.NewRecorder(), fail: reset}
	w := &envelopeWriter{ResponseWriter: rec}
	if _, err := w.Write([]byte("\x00\x00\x00\x00\x03")); err != nil {
		t.Fatalf("a held prefix: %v", err)
	}
	if n, err := w.Write([]byte("abc")); n != 0 || !errors.Is(err, reset) {
		t.Fatalf("Write = %d, %v; want 0, %v", n, err, reset)
	}
	if _, err := w.Write([]byte("\x00")); err != nil {
		t.Fatal(err)
	}
	if err := w.FlushError(); !errors.Is(err, reset) {
		t.Fatalf("FlushError = %v, want %v", err, reset)
	}
}
