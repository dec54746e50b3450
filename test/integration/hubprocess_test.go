package integration

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// hubProcess is the informerhub binary serving the control plane, run as a
// process so that a test can kill it as a node failure would: SIGKILL, no
// shutdown of any kind.
type hubProcess struct {
	t    *testing.T
	bin  string
	args []string
	addr string

	cmd    *exec.Cmd
	exited chan struct{}
	output syncBuffer // the process's logs, shown when the test fails
}

// syncBuffer is a bytes.Buffer the process's output goroutine writes while
// the test may read it.
type syncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startHubProcess runs the hub at a fixed loopback address, with extra
// flags, and waits until it serves.
func startHubProcess(t *testing.T, extraArgs ...string) *hubProcess {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, cluster.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	p := &hubProcess{t: t, bin: goBuild(t, "github.com/informerhub/informerhub/cmd/informerhub"), addr: addr, args: append([]string{
		"--kubeconfig", kubeconfig, "--listen", addr, "--auth", "none",
		"--max-subscriptions-per-identity", "100000", "--rate-per-identity", "100000", "--rate-burst-per-identity", "100000",
		"--log-level", "warn",
	}, extraArgs...)}
	p.start()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("hub process output:\n%s", p.output.String())
		}
	})
	return p
}

// start runs the process and waits until its health service says SERVING.
func (p *hubProcess) start() {
	p.t.Helper()
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.output, &p.output
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// WaitForReady rides out the moments before the process listens.
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		p.t.Fatalf("the hub process does not serve: %v %v\n%s", resp, err, p.output.String())
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *hubProcess) kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	p.cmd = nil
}
