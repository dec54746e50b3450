package natstest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BinaryEnv names the environment variable that, when set, is the path of
// the nats-server to run.
const BinaryEnv = "NATS_SERVER_BIN"

// Binary returns the path of nats-server: $NATS_SERVER_BIN, else
// .cache/tools/bin/nats-server of the repository that contains the working
// directory.
func Binary() (string, error) {
	if bin := os.Getenv(BinaryEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("%s: %w", BinaryEnv, err)
		}
		return bin, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		candidate := filepath.Join(dir, ".cache", "tools", "bin", "nats-server")
		if _, err := os.Stat(candidate); err == nil {
			return candidate, nil
		}
		if _, err := os.Stat(filepath.Join(dir, "tools", "nats", "go.mod")); err == nil {
			return "", fmt.Errorf("no nats-server at %s: run `make nats-server` to build it", candidate)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no nats-server: set %s or run `make nats-server` in the informerhub repository", BinaryEnv)
		}
		dir = parent
	}
}

// Options configures Start.
type Options struct {
	// StoreDir is JetStream's store directory, kept across Stop, Kill and
	// Start. Empty: a temporary directory of the test's.
	StoreDir string
	// Args are more nats-server flags, such as "--config", "file.conf"
	// (for JetStream's limits, which have no flags), passed after those
	// Start sets.
	Args []string
}

// Timeouts: how long a start may take until the server is healthy, and how
// long a graceful stop may take before the process is killed.
const (
	startTimeout = time.Minute
	stopTimeout  = 30 * time.Second
)

// logFile is where the server's output goes, within the server's own
// directory, across restarts, so that a failed start or test can say why.
const logFile = "nats-server.log"

// Server is a nats-server with JetStream, running as a process, started by
// Start. Its methods may be called from any goroutine.
type Server struct {
	bin      string
	dir      string // holds logFile and the ports files
	storeDir string
	args     []string
	log      *os.File // the process's stdout and stderr, across restarts

	mu          sync.Mutex
	port        int      // the client port; 0 until the first start chose it
	monitorPort int      // the monitoring port; 0 until the first start chose it
	proc        *process // the running process, or nil
}

// process is one run of nats-server.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has exited and err is set
	err    error         // what cmd.Wait returned
}

// hasExited reports whether the process has exited.
func (p *process) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Start starts nats-server with JetStream on free loopback ports, with its
// store in opts.StoreDir or a temporary directory, and returns once it is
// healthy; it fails t if the server does not start. The server is stopped
// when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	// Made before the cleanup below is registered, so removed after it ran:
	// cleanups run last registered, first run.
	s, err := Run(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("nats-server's output:%s", s.logTail())
		}
		s.log.Close()
	})
	return s
}

// Run is Start for a caller that is no test (the benchmark harness): dir,
// which the caller made and removes, holds the server's output and, unless
// opts.StoreDir is set, its store. Close stops the server.
func Run(dir string, opts Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	storeDir := opts.StoreDir
	if storeDir == "" {
		storeDir = filepath.Join(dir, "store")
	}
	log, err := os.OpenFile(filepath.Join(dir, logFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, storeDir: storeDir, args: opts.Args, log: log}
	if err := s.Start(); err != nil {
		log.Close()
		return nil, err
	}
	return s, nil
}

// Close stops a server Run started, as Stop does, and closes its output.
func (s *Server) Close() error {
	err := s.Stop()
	if cerr := s.log.Close(); err == nil {
		err = cerr
	}
	return err
}

// URL is where clients connect: nats://127.0.0.1:<port>. It stays the same
// across Stop, Kill and Start.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// MonitorURL is the base URL of the monitoring endpoint (/healthz, /varz,
// /jsz): http://127.0.0.1:<port>.
func (s *Server) MonitorURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.monitorURLLocked()
}

func (s *Server) monitorURLLocked() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.monitorPort))
}

// StoreDir is JetStream's store directory.
func (s *Server) StoreDir() string { return s.storeDir }

// Start starts the server again after Stop or Kill (or after it exited on
// its own), on the same ports with the same store, and returns once it is
// healthy: its streams recovered from the store.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.hasExited() {
		return errors.New("nats-server: Start while it is running")
	}
	s.proc = nil
	first := s.port == 0
	port, monitorPort := strconv.Itoa(s.port), strconv.Itoa(s.monitorPort)
	if first {
		port, monitorPort = "-1", "-1" // nats-server picks free ports
	}
	args := append([]string{
		"--addr", "127.0.0.1",
		"--port", port,
		"--http_port", monitorPort,
		"--server_name", "natstest",
		"--jetstream",
		"--store_dir", s.storeDir,
		"--ports_file_dir", s.dir,
	}, s.args...)
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting nats-server: %w", err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	deadline := time.Now().Add(startTimeout)
	if first {
		if err := s.readPortsLocked(p, deadline); err != nil {
			s.endLocked(p)
			return err
		}
	}
	if err := s.waitHealthyLocked(p, deadline); err != nil {
		s.endLocked(p)
		return err
	}
	s.proc = p
	return nil
}

// readPortsLocked learns the ports nats-server chose from the ports file
// it writes once it listens.
func (s *Server) readPortsLocked(p *process, deadline time.Time) error {
	path := filepath.Join(s.dir, fmt.Sprintf("%s_%d.ports", filepath.Base(s.bin), p.cmd.Process.Pid))
	for {
		err := s.parsePortsLocked(path)
		if err == nil {
			return nil
		}
		if p.hasExited() {
			return fmt.Errorf("nats-server exited before it listened: %v%s", p.err, s.logTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats-server wrote no ports file in %s: %w%s", startTimeout, err, s.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// parsePortsLocked reads a ports file; it fails while the file is missing
// or half-written.
func (s *Server) parsePortsLocked(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var ports struct {
		Nats       []string `json:"nats"`
		Monitoring []string `json:"monitoring"`
	}
	if err := json.Unmarshal(data, &ports); err != nil {
		return err
	}
	if len(ports.Nats) == 0 || len(ports.Monitoring) == 0 {
		return fmt.Errorf("%s names no client or monitoring port: %s", path, data)
	}
	port, err := portOf(ports.Nats[0])
	if err != nil {
		return err
	}
	monitorPort, err := portOf(ports.Monitoring[0])
	if err != nil {
		return err
	}
	s.port, s.monitorPort = port, monitorPort
	return nil
}

// portOf returns the port of a URL such as nats://127.0.0.1:4222.
func portOf(rawURL string) (int, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(u.Port())
}

// waitHealthyLocked waits until the monitoring endpoint's /healthz answers
// 200: the server accepts clients, JetStream is enabled and, in a single
// server, every stream and consumer in the store is recovered.
func (s *Server) waitHealthyLocked(p *process, deadline time.Time) error {
	// No keep-alive: no idle connection outlives the check (goleak).
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	healthz := s.monitorURLLocked() + "/healthz"
	for {
		resp, err := client.Get(healthz)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", healthz, resp.Status)
		}
		if p.hasExited() {
			return fmt.Errorf("nats-server exited before it was healthy: %v%s", p.err, s.logTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats-server not healthy in %s: %w%s", startTimeout, err, s.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// endLocked kills a process that failed to start and waits for it.
func (s *Server) endLocked(p *process) {
	p.cmd.Process.Kill()
	<-p.exited
}

// Stop stops the server gracefully (SIGTERM: JetStream flushes its store),
// killing it if it takes longer than 30 s, and returns once it has exited.
// Stopping a stopped server does nothing. It says if the server had exited
// on its own, or if it exited with an error.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	if p.hasExited() {
		return fmt.Errorf("nats-server had exited on its own: %v%s", p.err, s.logTail())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping nats-server: %w", err)
	}
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("nats-server did not stop in %s after SIGTERM: killed%s", stopTimeout, s.logTail())
	}
	if p.err != nil {
		return fmt.Errorf("nats-server stopped: %v%s", p.err, s.logTail())
	}
	return nil
}

// Kill kills the server with SIGKILL, as a crash or an OOM kill would: no
// graceful shutdown, connections are cut, and what it had not written to
// its store is lost. It returns once the process has exited. Start brings
// it back.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return errors.New("nats-server: Kill while it is not running")
	}
	s.proc = nil
	if p.hasExited() {
		return fmt.Errorf("nats-server had exited on its own: %v%s", p.err, s.logTail())
	}
	if err := p.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("killing nats-server: %w", err)
	}
	<-p.exited
	return nil
}

// Restart stops the server gracefully and starts it again, on the same
// ports with the same store; it returns once it is healthy.
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.Start()
}

// logTail returns the last lines of the server's output, for errors.
func (s *Server) logTail() string {
	data, err := os.ReadFile(filepath.Join(s.dir, logFile))
	if err != nil {
		return "\n(no output: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return "\n" + strings.Join(lines, "\n")
}
