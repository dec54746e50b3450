package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/informerhub/informerhub/internal/controlplane"
)

// Env is the control plane the scenarios share: a kube-apiserver and etcd,
// and the hub binary to run against them.
type Env struct {
	cp         *controlplane.ControlPlane
	rest       *rest.Config
	kube       kubernetes.Interface
	kubeconfig string // a file, for the hub process
	hubBinary  string
	dir        string // scratch space, removed by Stop

	apiserverPID, etcdPID int
	// ownWatches are the ConfigMap watches the API server has of its own
	// (its loopback informers), before any client's.
	ownWatches int
}

// StartEnv starts a control plane; hubBinary is a built cmd/informerhub.
func StartEnv(hubBinary string) (*Env, error) {
	dir, err := os.MkdirTemp("", "hubbench")
	if err != nil {
		return nil, err
	}
	cp, err := controlplane.Start()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	e := &Env{cp: cp, hubBinary: hubBinary, dir: dir}
	if err := e.init(); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

func (e *Env) init() error {
	var err error
	if e.apiserverPID, err = childProcess("kube-apiserver"); err != nil {
		return err
	}
	if e.etcdPID, err = childProcess("etcd"); err != nil {
		return err
	}
	e.rest = rest.CopyConfig(e.cp.Config)
	// The harness writes and lists as fast as the API server lets it; its
	// own rate limit would measure the harness.
	e.rest.QPS, e.rest.Burst = 10000, 10000
	if e.kube, err = kubernetes.NewForConfig(e.rest); err != nil {
		return err
	}
	if e.ownWatches, err = e.watchCount(context.Background(), "configmaps"); err != nil {
		return err
	}
	e.kubeconfig = filepath.Join(e.dir, "kubeconfig")
	return os.WriteFile(e.kubeconfig, e.cp.KubeConfig, 0o600)
}

// Stop stops the control plane.
func (e *Env) Stop() error {
	defer os.RemoveAll(e.dir)
	return e.cp.Stop()
}

// controlPlaneCPU is the CPU time kube-apiserver and etcd have used.
func (e *Env) controlPlaneCPU() (time.Duration, error) {
	return cpuTimes(e.apiserverPID, e.etcdPID)
}

// createNamespace creates a namespace for one scenario's objects.
func (e *Env) createNamespace(ctx context.Context, name string) error {
	_, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}

// clientWatches is the API server's open ConfigMap watches other than its
// own.
func (e *Env) clientWatches(ctx context.Context) (int, error) {
	n, err := e.watchCount(ctx, "configmaps")
	return n - e.ownWatches, err
}

// watchCount reads the API server's open WATCH requests of a resource from
// its apiserver_longrunning_requests metric.
func (e *Env) watchCount(ctx context.Context, resource string) (int, error) {
	body, err := e.kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	total, found, err := sumMetric(body, "apiserver_longrunning_requests", `verb="WATCH"`, `resource="`+resource+`"`)
	if err != nil || !found {
		return 0, err // not found: no watch of the resource has been opened yet
	}
	return int(total), nil
}

// sumMetric sums, in a Prometheus text exposition, the samples of name whose
// line contains every one of matches (label pairs such as `verb="WATCH"`),
// and reports whether there was any.
func sumMetric(body []byte, name string, matches ...string) (total float64, found bool, err error) {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
lines:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		for _, m := range matches {
			if !strings.Contains(line, m) {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, false, fmt.Errorf("metric line %q: %w", line, err)
		}
		total, found = total+v, true
	}
	return total, found, sc.Err()
}

// configMapsURL is the URL of a namespace's ConfigMaps on the API server,
// with query parameters.
func (e *Env) configMapsURL(namespace string, query url.Values) string {
	u := e.kube.CoreV1().RESTClient().Get().Namespace(namespace).Resource("configmaps").URL()
	u.RawQuery = query.Encode()
	return u.String()
}

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}

// errTimeout marks a scenario step that did not finish in time.
var errTimeout = errors.New("timed out")
