package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/informerhub/informerhub/internal/testhub"
)

// hubProcess is cmd/informerhub serving the Env's control plane, with debug
// endpoints for memory statistics and profiles.
type hubProcess struct {
	addr, debugAddr string
	cmd             *exec.Cmd
	exited          chan struct{}
	output          testhub.SyncBuffer
	started         time.Time
}

// startHub runs the hub with extra flags and waits until it serves. Limits
// meant for many identities are lifted: every bench client is anonymous.
func (e *Env) startHub(ctx context.Context, extraArgs ...string) (*hubProcess, error) {
	for attempt := 1; ; attempt++ {
		p, err := e.startHubOn(ctx, extraArgs...)
		// freeAddr's ports were free when it looked; another process (one
		// of the clients' connections) may have taken one since: retry on
		// fresh ones.
		if err != nil && strings.Contains(err.Error(), "address already in use") && attempt < 3 {
			continue
		}
		return p, err
	}
}

// startHubDialed starts a hub as startHub does, and dials one connection
// to it; stop closes the connection, then stops the hub.
func (e *Env) startHubDialed(ctx context.Context, extraArgs ...string) (hub *hubProcess, conn *grpc.ClientConn, stop func(), err error) {
	if hub, err = e.startHub(ctx, extraArgs...); err != nil {
		return nil, nil, nil, err
	}
	conns, err := hubConns(hub.addr, 1, 0)
	if err != nil {
		hub.stop()
		return nil, nil, nil, err
	}
	return hub, conns[0], func() {
		closeConns(conns)
		hub.stop()
	}, nil
}

// startHubOn is startHub on two ports freeAddr finds.
func (e *Env) startHubOn(ctx context.Context, extraArgs ...string) (*hubProcess, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	debugAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p := &hubProcess{addr: addr, debugAddr: debugAddr, exited: make(chan struct{})}
	args := append([]string{
		"--kubeconfig", e.kubeconfig, "--listen", addr, "--debug-listen", debugAddr, "--auth", "none",
		"--max-subscriptions-per-identity", "1000000", "--max-subscriptions", "1000000", "--rate-per-identity", "1000000", "--rate-burst-per-identity", "1000000",
		"--max-concurrent-streams", "100000", "--kube-api-qps", "1000", "--kube-api-burst", "1000",
		"--log-level", "warn",
	}, extraArgs...)
	p.cmd = exec.Command(e.hubBinary, args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.output, &p.output
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", e.hubBinary, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	if err := testhub.WaitServing(ctx, p.addr, p.exited); err != nil {
		p.stop()
		return nil, fmt.Errorf("%w\n%s", err, p.output.String())
	}
	return p, nil
}

func (p *hubProcess) pid() int { return p.cmd.Process.Pid }

// stop ends the hub with SIGTERM, then SIGKILL if it lingers.
func (p *hubProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// memStats is what the harness reads of the hub's runtime.MemStats.
type memStats struct {
	HeapAlloc  uint64
	StackInuse uint64
	// HeapLive is the heap the hub's last collection found live (its
	// heapLive expvar): HeapAlloc without the garbage since.
	HeapLive uint64 `json:"-"`
}

// memory collects garbage in the hub, then reads its memory statistics.
func (p *hubProcess) memory(ctx context.Context) (memStats, error) {
	// A heap profile with gc=1 runs a collection first.
	if _, err := p.debugGet(ctx, "/debug/pprof/heap?gc=1"); err != nil {
		return memStats{}, err
	}
	return p.memoryNow(ctx)
}

// memoryNow reads the hub's memory statistics as they are, without a
// collection first: HeapAlloc includes the garbage not yet collected.
func (p *hubProcess) memoryNow(ctx context.Context) (memStats, error) {
	body, err := p.debugGet(ctx, "/debug/vars")
	if err != nil {
		return memStats{}, err
	}
	var vars struct {
		MemStats memStats `json:"memstats"`
		HeapLive uint64   `json:"heapLive"`
	}
	if err := json.Unmarshal(body, &vars); err != nil {
		return memStats{}, fmt.Errorf("/debug/vars: %w", err)
	}
	vars.MemStats.HeapLive = vars.HeapLive
	return vars.MemStats, nil
}

// profile saves one of the hub's pprof profiles (for example
// "profile?seconds=10" or "heap") into file.
func (p *hubProcess) profile(ctx context.Context, name, file string) error {
	body, err := p.debugGet(ctx, "/debug/pprof/"+name)
	if err != nil {
		return err
	}
	return os.WriteFile(file, body, 0o644)
}

func (p *hubProcess) debugGet(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.debugAddr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return body, nil
}

// cpuProfile starts a CPU profile of the hub lasting d, rounded up to whole
// seconds (at least one), saved into file; the function it returns waits
// for the profile and returns its error.
func (p *hubProcess) cpuProfile(ctx context.Context, d time.Duration, file string) func() error {
	done := make(chan error, 1)
	seconds := max(1, int(math.Ceil(d.Seconds())))
	go func() { done <- p.profile(ctx, fmt.Sprintf("profile?seconds=%d", seconds), file) }()
	return func() error { return <-done }
}
