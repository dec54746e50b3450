package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/goleak"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Version is the Kubernetes version `make controlplane` builds.
const Version = "v1.37.1"

// AssetsDir returns the directory holding kube-apiserver and etcd:
// $KUBEBUILDER_ASSETS, else .cache/controlplane/<Version> of the repository
// that contains the working directory.
func AssetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		candidate := filepath.Join(dir, ".cache", "controlplane", Version)
		if _, err := os.Stat(filepath.Join(candidate, "kube-apiserver")); err == nil {
			return candidate, nil
		}
		if _, err := os.Stat(filepath.Join(dir, "tools", "controlplane", "go.mod")); err == nil {
			return "", fmt.Errorf("no kube-apiserver in %s: run `make controlplane` to build it", candidate)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no control plane binaries: set KUBEBUILDER_ASSETS or run `make controlplane` in the informerhub repository")
		}
		dir = parent
	}
}

// ControlPlane is a running kube-apiserver and etcd.
type ControlPlane struct {
	env *envtest.Environment
	// Config reaches the API server as an administrator (system:masters).
	Config *rest.Config
	// KubeConfig is a kubeconfig file's content for the same user.
	KubeConfig []byte
}

// Start starts a control plane. Stop it when done.
func Start() (*ControlPlane, error) { return StartWith(Options{}) }

// Options configures StartWith.
type Options struct {
	// EtcdDataDir keeps etcd's data there, across starts; empty: in a
	// temporary directory that Stop removes.
	EtcdDataDir string
	// FeatureGates are kube-apiserver's --feature-gates, such as
	// "ShardedListAndWatch=true".
	FeatureGates []string
	// ServiceAccountKeyFile keeps the key that signs service account tokens
	// in this file (made on the first start), and the tokens' issuer fixed,
	// so that with EtcdDataDir the tokens of one start are valid in the
	// next; empty: a new key each start, in a temporary directory.
	ServiceAccountKeyFile string
}

// serviceAccountIssuer is the issuer of service account tokens with a kept
// key: envtest's default is the API server's URL, whose port changes with
// each start.
const serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// StartWith starts a control plane configured by opts. Stop it when done.
func StartWith(opts Options) (*ControlPlane, error) {
	dir, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    dir,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	if opts.EtcdDataDir != "" {
		env.ControlPlane.Etcd = &envtest.Etcd{DataDir: opts.EtcdDataDir}
	}
	if opts.ServiceAccountKeyFile != "" {
		if err := ensureSigningKey(opts.ServiceAccountKeyFile); err != nil {
			return nil, err
		}
		args := env.ControlPlane.GetAPIServer().Configure()
		args.Set("service-account-key-file", opts.ServiceAccountKeyFile)
		args.Set("service-account-signing-key-file", opts.ServiceAccountKeyFile)
		args.Set("service-account-issuer", serviceAccountIssuer)
	}
	if len(opts.FeatureGates) > 0 {
		env.ControlPlane.GetAPIServer().Configure().Append("feature-gates", strings.Join(opts.FeatureGates, ","))
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", dir, err)
	}
	return &ControlPlane{env: env, Config: cfg, KubeConfig: env.KubeConfig}, nil
}

// IgnoredGoroutines are the goroutines a test package that talks to the
// control plane leaves running on purpose, for goleak: the idle keep-alive
// connections of client-go's shared transports, and klog's flush daemon.
func IgnoredGoroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	}
}

// Stop stops the control plane and removes its data, unless
// Options.EtcdDataDir keeps it.
func (c *ControlPlane) Stop() error { return c.env.Stop() }

// ensureSigningKey makes an ECDSA P-256 key in PEM at path unless a file is
// there: kube-apiserver signs service account tokens with it (ES256), and
// verifies them with it, the public key being part of the private one.
func ensureSigningKey(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	// Written whole or not at all, under a name of its own: a half-written
	// key would fail every later start, and two starts at once must not
	// write into one file.
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp") // mode 0600
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // once renamed, there is nothing to remove
	if _, err := tmp.Write(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
