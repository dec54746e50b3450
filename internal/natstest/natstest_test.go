package natstest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
	"golang.org/x/mod/modfile"

	"github.com/informerhub/informerhub/internal/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// resumeHeader stands for the header in which the exporter keeps its
// resume point, written with the change it follows.
const resumeHeader = "Informerhub-Resume"

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// connect connects to s, reconnecting without end and quickly, as a
// client that outlives a restart of the server should; the test's end
// closes the connection.
func connect(t *testing.T, s *natstest.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close) // before the server stops: cleanups run last registered, first run
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// publish publishes a change to subject with a Nats-Msg-Id and a resume
// point in its headers.
func publish(ctx context.Context, t *testing.T, js jetstream.JetStream, subject, id, resume, data string) *jetstream.PubAck {
	t.Helper()
	msg := nats.NewMsg(subject)
	msg.Header.Set(jetstream.MsgIDHeader, id)
	msg.Header.Set(resumeHeader, resume)
	msg.Data = []byte(data)
	ack, err := js.PublishMsg(ctx, msg)
	if err != nil {
		t.Fatalf("publishing %s to %s: %v", id, subject, err)
	}
	return ack
}

func messages(ctx context.Context, t *testing.T, stream jetstream.Stream) uint64 {
	t.Helper()
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// wantLast checks the last message of a stream on subject (a wildcard
// one names the stream's last message): its sequence, Nats-Msg-Id,
// resume point and data.
func wantLast(ctx context.Context, t *testing.T, stream jetstream.Stream, subject string, seq uint64, id, resume, data string) *jetstream.RawStreamMsg {
	t.Helper()
	msg, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("the last message on %s: %v", subject, err)
	}
	if msg.Sequence != seq || msg.Header.Get(jetstream.MsgIDHeader) != id || msg.Header.Get(resumeHeader) != resume || string(msg.Data) != data {
		t.Fatalf("the last message on %s is #%d %s=%q %s=%q %q, want #%d %q %q %q (headers %v)", subject,
			msg.Sequence, jetstream.MsgIDHeader, msg.Header.Get(jetstream.MsgIDHeader), resumeHeader, msg.Header.Get(resumeHeader), msg.Data,
			seq, id, resume, data, msg.Header)
	}
	return msg
}

// The mechanism informerhub-export rests on: JetStream drops a change
// published again with the same Nats-Msg-Id, and the last message, resume
// point in its headers, survives a restart of the server.
func TestAStreamDropsARepublishedChangeAndKeepsTheLastAcrossARestart(t *testing.T) {
	ctx := ctxFor(t)
	server := natstest.Start(t, natstest.Options{})
	_, js := connect(t, server)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     "EXPORT",
		Subjects: []string{"export.>"},
		Storage:  jetstream.FileStorage,
	})
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Duplicates != 2*time.Minute {
		t.Errorf("the default duplicate window is %s, want 2m", info.Config.Duplicates)
	}

	if ack := publish(ctx, t, js, "export.a", "change-1", "token-1", "one"); ack.Sequence != 1 || ack.Duplicate {
		t.Fatalf("the first publish: %+v", ack)
	}
	// The same id, whatever the data and headers: dropped, acknowledged
	// with the first one's sequence.
	if ack := publish(ctx, t, js, "export.a", "change-1", "token-1-again", "one again"); ack.Sequence != 1 || !ack.Duplicate {
		t.Fatalf("publishing change-1 again: %+v, want a duplicate of #1", ack)
	}
	if n := messages(ctx, t, stream); n != 1 {
		t.Fatalf("the stream holds %d messages after a change published twice, want 1", n)
	}
	if ack := publish(ctx, t, js, "export.b", "change-2", "token-2", "two"); ack.Sequence != 2 || ack.Duplicate {
		t.Fatalf("the second change: %+v", ack)
	}
	wantLast(ctx, t, stream, "export.a", 1, "change-1", "token-1", "one")
	wantLast(ctx, t, stream, "export.>", 2, "change-2", "token-2", "two")

	if err := server.Restart(); err != nil {
		t.Fatal(err)
	}
	// The client reconnects to the same URL and finds the stream.
	if n := messages(ctx, t, stream); n != 2 {
		t.Fatalf("after a restart the stream holds %d messages, want 2", n)
	}
	wantLast(ctx, t, stream, "export.>", 2, "change-2", "token-2", "two")
	// The duplicate window's ids are recovered from the store.
	if ack := publish(ctx, t, js, "export.a", "change-1", "token-1", "one"); ack.Sequence != 1 || !ack.Duplicate {
		t.Fatalf("after a restart, publishing change-1 again: %+v, want a duplicate of #1", ack)
	}
	if n := messages(ctx, t, stream); n != 2 {
		t.Fatalf("after a restart and a republished change the stream holds %d messages, want 2", n)
	}
}

// A server killed (SIGKILL) keeps what it acknowledged: it wrote it to its
// files before the acknowledgement, and only a crash of the machine before
// the OS flushed them would lose it (JetStream fsyncs every 2 min by
// default).
func TestAKilledServerKeepsWhatItAcknowledged(t *testing.T) {
	ctx := ctxFor(t)
	server := natstest.Start(t, natstest.Options{})
	_, js := connect(t, server)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EXPORT", Subjects: []string{"export.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"change-1", "change-2", "change-3"} {
		publish(ctx, t, js, "export.a", id, "token-"+id, id)
	}
	if err := server.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	if n := messages(ctx, t, stream); n != 3 {
		t.Fatalf("after SIGKILL the stream holds %d messages, want 3", n)
	}
	wantLast(ctx, t, stream, "export.>", 3, "change-3", "token-change-3", "change-3")
	if ack := publish(ctx, t, js, "export.a", "change-3", "token-change-3", "change-3"); !ack.Duplicate {
		t.Fatalf("after SIGKILL, publishing change-3 again: %+v, want a duplicate", ack)
	}
}

// Deduplication lasts the duplicate window only: past it, the same
// Nats-Msg-Id is stored again. The resume point, not the window, is what
// keeps an exporter down longer than the window from repeating changes.
func TestTheDuplicateWindowEnds(t *testing.T) {
	ctx := ctxFor(t)
	server := natstest.Start(t, natstest.Options{})
	_, js := connect(t, server)
	const window = 300 * time.Millisecond
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "EXPORT", Subjects: []string{"export.>"}, Storage: jetstream.FileStorage, Duplicates: window,
	})
	if err != nil {
		t.Fatal(err)
	}
	publish(ctx, t, js, "export.a", "change-1", "token-1", "one")
	if ack := publish(ctx, t, js, "export.a", "change-1", "token-1", "one"); !ack.Duplicate {
		t.Fatalf("within the window: %+v, want a duplicate", ack)
	}
	time.Sleep(3 * window) // the server prunes its ids on a timer of about the window
	if ack := publish(ctx, t, js, "export.a", "change-1", "token-1", "one"); ack.Duplicate || ack.Sequence != 2 {
		t.Fatalf("past the window: %+v, want #2 stored", ack)
	}
	if n := messages(ctx, t, stream); n != 2 {
		t.Fatalf("past the window the stream holds %d messages, want 2", n)
	}
}

// Two ways to read the last message back, which differ in the headers they
// return: the JetStream API ($JS.API.STREAM.MSG.GET, the default) returns
// the headers as published; a direct get ($JS.API.DIRECT.GET, which
// jetstream uses whenever the stream allows it) adds Nats-Stream,
// Nats-Sequence, Nats-Time-Stamp and Nats-Subject to them.
func TestTheLastMessageReadDirectlyHasMoreHeaders(t *testing.T) {
	ctx := ctxFor(t)
	server := natstest.Start(t, natstest.Options{})
	_, js := connect(t, server)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EXPORT", Subjects: []string{"export.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	publish(ctx, t, js, "export.a", "change-1", "token-1", "one")
	publish(ctx, t, js, "export.b", "change-2", "token-2", "two")

	viaAPI := wantLast(ctx, t, stream, "export.b", 2, "change-2", "token-2", "two")
	if got := headerNames(viaAPI.Header); got != "Informerhub-Resume Nats-Msg-Id" {
		t.Errorf("through the JetStream API the headers are %s, want those published", got)
	}

	direct, err := js.UpdateStream(ctx, jetstream.StreamConfig{
		Name: "EXPORT", Subjects: []string{"export.>"}, Storage: jetstream.FileStorage, AllowDirect: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	viaDirect := wantLast(ctx, t, direct, "export.b", 2, "change-2", "token-2", "two")
	if got := headerNames(viaDirect.Header); got != "Informerhub-Resume Nats-Msg-Id Nats-Sequence Nats-Stream Nats-Subject Nats-Time-Stamp" {
		t.Errorf("through a direct get the headers are %s", got)
	}
	// A wildcard names the stream's last message here too, though the
	// subject is a part of the direct get's own subject.
	wantLast(ctx, t, direct, "export.>", 2, "change-2", "token-2", "two")
	// The stream's last sequence, then a get by sequence, names the last
	// message whatever its subject.
	info, err := direct.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last, err := direct.GetMsg(ctx, info.State.LastSeq)
	if err != nil {
		t.Fatal(err)
	}
	if last.Sequence != 2 || last.Header.Get(resumeHeader) != "token-2" {
		t.Errorf("the message at the last sequence is #%d with %s=%q, want #2 token-2", last.Sequence, resumeHeader, last.Header.Get(resumeHeader))
	}
	// A stream with nothing on a subject says so with an error of its own.
	if _, err := direct.GetLastMsgForSubject(ctx, "export.none"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("the last message on an empty subject: %v, want ErrMsgNotFound", err)
	}
}

// headerNames returns a header's names, sorted, space-separated.
func headerNames(h nats.Header) string {
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}

// The helper's own behaviour: the same URL and store across Stop, Kill and
// Start; Stop twice is fine, Kill and Start at the wrong time are errors.
func TestAServerStopsAndStartsOnItsPortsAndStore(t *testing.T) {
	store := t.TempDir()
	server := natstest.Start(t, natstest.Options{StoreDir: store})
	url, monitor := server.URL(), server.MonitorURL()
	if server.StoreDir() != store {
		t.Errorf("StoreDir is %s, want %s", server.StoreDir(), store)
	}
	if err := server.Start(); err == nil {
		t.Error("Start while running succeeded")
	}
	if err := server.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := server.Stop(); err != nil {
		t.Errorf("Stop when stopped: %v", err)
	}
	if err := server.Kill(); err == nil {
		t.Error("Kill when stopped succeeded")
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	if server.URL() != url || server.MonitorURL() != monitor {
		t.Errorf("after a restart the server is at %s and %s, want %s and %s", server.URL(), server.MonitorURL(), url, monitor)
	}
	if _, err := os.Stat(filepath.Join(store, "jetstream")); err != nil {
		t.Errorf("JetStream keeps nothing in the store: %v", err)
	}
}

// The binary is the version tools/nats pins.
func TestTheBinaryIsThePinnedVersion(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "tools", "nats", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pinned string
	for _, r := range mod.Require {
		if r.Mod.Path == "github.com/nats-io/nats-server/v2" {
			pinned = r.Mod.Version
		}
	}
	bin, err := natstest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", bin, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "nats-server: "+pinned {
		t.Errorf("%s --version says %q, want nats-server: %s (tools/nats/go.mod)", bin, got, pinned)
	}
}

// Without a binary, Binary says what to set or build.
func TestAMissingBinarySaysWhatToBuild(t *testing.T) {
	t.Run("NATS_SERVER_BIN names no file", func(t *testing.T) {
		t.Setenv(natstest.BinaryEnv, filepath.Join(t.TempDir(), "nats-server"))
		if _, err := natstest.Binary(); err == nil || !strings.Contains(err.Error(), natstest.BinaryEnv) {
			t.Errorf("Binary: %v, want an error naming %s", err, natstest.BinaryEnv)
		}
	})
	t.Run("a repository without the built binary", func(t *testing.T) {
		t.Setenv(natstest.BinaryEnv, "")
		repo := t.TempDir()
		if err := os.MkdirAll(filepath.Join(repo, "tools", "nats"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, "tools", "nats", "go.mod"), []byte("module x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		sub := filepath.Join(repo, "internal", "natstest")
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Chdir(sub)
		if _, err := natstest.Binary(); err == nil || !strings.Contains(err.Error(), "make nats-server") {
			t.Errorf("Binary: %v, want an error saying to run make nats-server", err)
		}
	})
}
