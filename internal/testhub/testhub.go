// Package testhub runs the informerhub binary as a process against a test
// control plane (internal/controlplane), for the tests that drive the hub
// from outside Go: clients in other languages, grpcurl commands of the docs,
// and the manifests of deploy/.
package testhub

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Process is the informerhub binary serving a control plane.
type Process struct {
	// Addr is the loopback host:port the hub serves gRPC on.
	Addr string

	t      testing.TB
	bin    string
	args   []string
	cmd    *exec.Cmd
	exited chan struct{}
	output SyncBuffer // the process's logs, shown when the test fails
}

// Start runs the hub on a free loopback port, reading the cluster from the
// kubeconfig content given, with args after the defaults (--auth none,
// limits out of the way, warnings and errors logged); later flags win. It
// waits until the hub's health service says SERVING, and kills the hub
// when the test ends, logging its output if the test failed.
func Start(t testing.TB, kubeconfig []byte, args ...string) *Process {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	p := &Process{t: t, bin: Build(t, "github.com/informerhub/informerhub/cmd/informerhub")}
	for attempt := 1; ; attempt++ {
		p.Addr = FreeAddr(t)
		p.args = append([]string{
			"--kubeconfig", path, "--listen", p.Addr, "--auth", "none",
			"--max-subscriptions-per-identity", "100000", "--max-subscriptions", "100000", "--rate-per-identity", "100000", "--rate-burst-per-identity", "100000",
			"--log-level", "warn",
		}, args...)
		err := p.start()
		if err == nil {
			break
		}
		// FreeAddr's port was free when it looked; another process (a
		// client's connection, another test's listener) may have taken it
		// since. A port of this test's own choosing (in args) would fail
		// again: only a fresh one is retried.
		if !strings.Contains(p.Output(), "address already in use") || attempt == 3 {
			t.Fatalf("%v\n%s", err, p.Output())
		}
		p.output.Reset()
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("hub process output:\n%s", p.Output())
		}
	})
	return p
}

// Restart starts the process again after Kill (Start starts it the first
// time), and waits until it serves.
func (p *Process) Restart() {
	p.t.Helper()
	if err := p.start(); err != nil {
		p.t.Fatalf("%v\n%s", err, p.Output())
	}
}

// start starts the process, and waits until it serves.
func (p *Process) start() error {
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.output, &p.output
	if err := p.cmd.Start(); err != nil {
		return err
	}
	p.exited = make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	if err := WaitServing(context.Background(), p.Addr, p.exited); err != nil {
		p.Kill()
		return err
	}
	return nil
}

// WaitServing waits until the hub at addr says SERVING on its health
// service, for at most a minute; it gives up at once when exited closes
// (the process is gone: a bad flag, say). The hub says NOT_SERVING until it
// has reached the API server, so it watches the status rather than
// checking it once.
func WaitServing(ctx context.Context, addr string, exited <-chan struct{}) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	// WaitForReady rides out the moments before the process listens.
	health, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("the hub process does not serve: %w", err)
	}
	for {
		resp, err := health.Recv()
		if err != nil {
			return fmt.Errorf("the hub process does not serve: %w", err)
		}
		if resp.Status == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
	}
}

// Terminate sends SIGTERM, as the kubelet does to a pod being deleted, and
// waits for the process to exit; it fails the test if the hub does not
// exit within timeout, or exits with an error.
func (p *Process) Terminate(timeout time.Duration) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.t.Fatalf("the hub did not exit within %v of SIGTERM", timeout)
	}
	if state := p.cmd.ProcessState; state == nil || !state.Success() {
		p.t.Fatalf("the hub exited after SIGTERM with %v\n%s", state, p.Output())
	}
	p.cmd = nil
}

// Kill sends SIGKILL, as a node failure would, and waits for the process
// to be gone.
func (p *Process) Kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	p.cmd = nil
}

// Output returns what the process has logged so far.
func (p *Process) Output() string { return p.output.String() }

// FreeAddr returns a loopback host:port that nothing listened on a moment
// ago, for a process that must be told its address up front.
func FreeAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

type build struct {
	once sync.Once
	path string
	err  error
}

var builds sync.Map // package path → *build

// Build compiles a main package of the module once per test binary and
// returns the executable's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg, &build{})
	b := v.(*build)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", filepath.Base(pkg))
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, filepath.Base(pkg))
		if out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building %s: %w\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// SyncBuffer is a bytes.Buffer that a process's output goroutine writes
// while others read it.
type SyncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

// Reset empties the buffer.
func (b *SyncBuffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
