package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// APIServer is a kube-apiserver of its own, sharing the etcd of the
// ControlPlane that started it, that a test can kill and restart to inject
// faults without disturbing the shared API server. See
// ControlPlane.StartAPIServer.
type APIServer struct {
	// Config reaches this API server as an administrator (user admin, group
	// system:masters), like ControlPlane.Config. It stays valid across Kill
	// and Start: the port, serving certificate and client CA do not change.
	Config *rest.Config

	mu      sync.Mutex
	server  *envtest.APIServer
	dir     string   // CertDir; also holds logFile
	log     *os.File // the process's stdout and stderr, across restarts
	running bool
	closed  bool
}

// logFile is where an APIServer's output goes, within its directory, so that
// a failed start can say why.
const logFile = "kube-apiserver.log"

// StartAPIServer starts a second kube-apiserver on the control plane's etcd,
// configured like the shared one (envtest's defaults) plus extraArgs, which
// are kube-apiserver flags of the form "--name=value" or "--name" (for
// example "--watch-cache=false"); a flag given here replaces envtest's
// default for it, and a flag given several times is passed several times.
// It returns once the API server is ready. Close it when done.
//
// Objects written through either API server are visible through the other:
// they share the storage. They do not share service-account signing keys.
func (c *ControlPlane) StartAPIServer(extraArgs ...string) (*APIServer, error) {
	shared := c.env.ControlPlane.APIServer
	path := shared.Path
	if path == "" {
		dir, err := AssetsDir()
		if err != nil {
			return nil, err
		}
		path = filepath.Join(dir, "kube-apiserver")
	}
	// A directory of our own rather than one envtest allocates: envtest
	// forgets (and deletes) a directory it allocated when the server stops,
	// and a restart would then come up with new certificates.
	dir, err := os.MkdirTemp("", "informerhub-apiserver-")
	if err != nil {
		return nil, err
	}
	log, err := os.OpenFile(filepath.Join(dir, logFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	server := &envtest.APIServer{
		Path:         path,
		EtcdURL:      c.env.ControlPlane.Etcd.URL,
		CertDir:      dir,
		StartTimeout: 2 * time.Minute,
		StopTimeout:  time.Minute,
		Out:          log,
		Err:          log,
	}
	if err := configure(server.Configure(), extraArgs); err != nil {
		log.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	s := &APIServer{server: server, dir: dir, log: log}
	if err := s.start(); err != nil {
		s.Close()
		return nil, err
	}
	// The same user the shared control plane's Config has, provisioned by
	// this server's client CA (Authn), which envtest set up on start.
	cfg, err := server.SecureServing.AddUser(
		envtest.User{Name: "admin", Groups: []string{"system:masters"}},
		&rest.Config{QPS: 1000, Burst: 2000},
	)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("provisioning the admin user: %w", err)
	}
	cfg.Host = server.SecureServing.URL("https", "/").String()
	cfg.CAData = server.SecureServing.CA
	s.Config = cfg
	if err := s.waitReady(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// configure turns kube-apiserver flags into envtest arguments. Set, not
// Append: Append would keep envtest's default next to the given value.
func configure(args *envtest.Arguments, flags []string) error {
	values := map[string][]string{}
	var order []string
	for _, flag := range flags {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(flag, "--"), "=")
		if !strings.HasPrefix(flag, "--") || name == "" {
			return fmt.Errorf("kube-apiserver flag %q is not of the form --name=value or --name", flag)
		}
		if _, seen := values[name]; !seen {
			order = append(order, name)
			values[name] = nil
		}
		if hasValue {
			values[name] = append(values[name], value)
		}
	}
	for _, name := range order {
		if len(values[name]) == 0 {
			args.Enable(name) // --name, without a value
		} else {
			args.Set(name, values[name]...)
		}
	}
	return nil
}

// start starts the process and waits for its /healthz (envtest's check).
func (s *APIServer) start() error {
	if err := s.server.Start(); err != nil {
		return fmt.Errorf("starting kube-apiserver: %w%s", err, s.logTail())
	}
	s.running = true
	return nil
}

// waitReady waits for /readyz as the admin user: envtest only waits for
// /healthz, which can answer before the server serves everything (for
// example before its informers have synced).
func (s *APIServer) waitReady() error {
	tlsConfig, err := rest.TLSConfigFor(s.Config)
	if err != nil {
		return err
	}
	// A transport of our own, closed below: client-go's would be cached and
	// keep idle connections for the rest of the process.
	transport := &http.Transport{TLSClientConfig: tlsConfig}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	url := strings.TrimSuffix(s.Config.Host, "/") + "/readyz"
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready: %w%s", err, s.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Start starts the API server again after Kill, on the same port with the
// same certificates, and waits until it is ready.
func (s *APIServer) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return errors.New("kube-apiserver: Start after Close")
	case s.running:
		return errors.New("kube-apiserver: Start while it is running")
	}
	if err := s.start(); err != nil {
		return err
	}
	return s.waitReady()
}

// Kill kills the API server with SIGKILL, as a crash or an OOM kill would:
// no graceful shutdown, connections are cut. It returns once the process has
// exited and its port is free. Start brings it back.
//
// envtest does not expose the process, so Kill finds it in /proc by its
// command line, which names the server's own certificate directory; Kill
// therefore works on Linux only.
func (s *APIServer) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return errors.New("kube-apiserver: Kill while it is not running")
	}
	s.running = false // if there is no process to kill, none runs
	pid, err := s.pid()
	if err != nil {
		return err
	}
	return terminate(pid, 0)
}

// terminate sends SIGTERM to pid, if grace > 0, then SIGKILL if it has not
// exited within grace, and waits for it to exit.
func terminate(pid int, grace time.Duration) error {
	// On Linux, a pidfd: signals cannot reach another process that reused
	// the pid.
	p, err := os.FindProcess(pid)
	if err != nil {
		return fmt.Errorf("kube-apiserver (pid %d): %w", pid, err)
	}
	defer p.Release()
	if grace > 0 {
		if err := p.Signal(syscall.SIGTERM); err != nil {
			return ignoreDone(err)
		}
		if exited(p, grace) {
			return nil
		}
	}
	if err := p.Kill(); err != nil {
		return ignoreDone(err)
	}
	if !exited(p, time.Minute) {
		return fmt.Errorf("kube-apiserver (pid %d) still exists a minute after SIGKILL", pid)
	}
	return nil
}

// exited waits up to timeout for p to be gone. envtest waits for its
// child, which reaps it; it exists (as a zombie) until then.
func exited(p *os.Process, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for !errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func ignoreDone(err error) error {
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return fmt.Errorf("signalling kube-apiserver: %w", err)
}

// pid finds the kube-apiserver process by its --cert-dir, which is unique to
// s (a temporary directory). The binary's path must match too.
func (s *APIServer) pid() (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("finding the kube-apiserver process needs /proc: %w", err)
	}
	certDir := []byte("--cert-dir=" + s.dir)
	binary := []byte(s.server.Path)
	for _, entry := range entries {
		pid, err := strconv.Atoi(entry.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", entry.Name(), "cmdline"))
		if err != nil {
			continue // exited meanwhile, or not ours to read
		}
		args := bytes.Split(bytes.TrimSuffix(cmdline, []byte{0}), []byte{0})
		if len(args) == 0 || !bytes.Equal(args[0], binary) {
			continue
		}
		for _, arg := range args[1:] {
			if bytes.Equal(arg, certDir) {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no kube-apiserver process with --cert-dir=%s", s.dir)
}

// Close stops the API server, if it runs, and removes its certificates and
// log. It may be called more than once, and after Kill.
//
// It sends SIGTERM, then SIGKILL after closeGrace: kube-apiserver's graceful
// shutdown waits up to a minute for open watches to end, and a test's
// clients may still hold some.
func (s *APIServer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.running {
		s.running = false
		if pid, err := s.pid(); err == nil {
			errs = append(errs, terminate(pid, closeGrace))
		} else if err := s.server.Stop(); err != nil { // no /proc: envtest's way
			errs = append(errs, fmt.Errorf("stopping kube-apiserver: %w", err))
		}
	}
	errs = append(errs, s.log.Close(), os.RemoveAll(s.dir))
	return errors.Join(errs...)
}

const closeGrace = 5 * time.Second

// logTail returns the end of the server's output, for error messages.
func (s *APIServer) logTail() string {
	data, err := os.ReadFile(filepath.Join(s.dir, logFile))
	if err != nil || len(data) == 0 {
		return ""
	}
	const max = 4 << 10
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return "\nkube-apiserver's output ends with:\n" + string(data)
}

// compactRevKey is the etcd key through which kube-apiservers tell each
// other the revision they compacted at (k8s.io/apiserver/pkg/storage/etcd3).
const compactRevKey = "compact_rev_key"

// Compact compacts etcd at its current revision and returns that revision,
// as a cluster does (every 5 minutes by default) while a client is away.
// Etcd then no longer has the revisions before it: a list or get at an
// older resourceVersion, or a watch from one older than revision-1 (a watch
// from rv starts at rv+1), gets 410 Gone if the API server reads from etcd.
//
// Which reads go to etcd is up to the API server. One with
// --watch-cache=false sends them all, and answers 410 at once. One with the
// watch cache (the default, and the shared one) serves a watch from its
// event buffer while the buffer reaches back far enough, and, since
// Kubernetes 1.34 (ListFromCacheSnapshot), a list with
// resourceVersionMatch=Exact from a snapshot while it keeps one. Compact
// records the revision under compact_rev_key, as kube-apiserver's own
// compactor does, so that API servers drop those snapshots too: they watch
// the key, and each cache polls what they saw every 15 seconds.
func (c *ControlPlane) Compact(ctx context.Context) (revision int64, err error) {
	client, err := clientv3.New(clientv3.Config{
		Endpoints: []string{c.env.ControlPlane.Etcd.URL.String()},
		Logger:    zap.NewNop(),
	})
	if err != nil {
		return 0, fmt.Errorf("connecting to etcd: %w", err)
	}
	defer client.Close()
	// Any key will do: every response carries the store's revision.
	resp, err := client.Get(ctx, compactRevKey, clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("reading etcd's revision: %w", err)
	}
	revision = resp.Header.Revision
	// Unlike kube-apiserver's compactor, no compare-and-swap on the key's
	// version: a compactor whose swap then fails adopts the new version and
	// compacts again one interval later, as when another API server won.
	if _, err := client.Put(ctx, compactRevKey, strconv.FormatInt(revision, 10)); err != nil {
		return 0, fmt.Errorf("recording compaction revision %d: %w", revision, err)
	}
	// Physical: return once the compaction has been applied, not merely
	// scheduled, so that the caller's next read sees it.
	_, err = client.Compact(ctx, revision, clientv3.WithCompactPhysical())
	if errors.Is(err, rpctypes.ErrCompacted) {
		err = nil // already compacted at revision
	}
	if err != nil {
		return 0, fmt.Errorf("compacting etcd at revision %d: %w", revision, err)
	}
	return revision, nil
}
