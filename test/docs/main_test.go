package docs

import (
	"fmt"
	"log/slog"
	"os"
	"testing"

	"go.uber.org/goleak"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/informerhub/informerhub/internal/controlplane"
)

var (
	cluster *controlplane.ControlPlane
	kube    kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	klog.SetSlogLogger(slog.New(slog.DiscardHandler))
	var err error
	if cluster, err = controlplane.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg := rest.CopyConfig(cluster.Config)
	cfg.QPS, cfg.Burst = 100, 100 // waitForHub polls
	kube = kubernetes.NewForConfigOrDie(cfg)
	code := m.Run()
	if err := cluster.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		return 1
	}
	if code != 0 {
		return code
	}
	if err := goleak.Find(controlplane.IgnoredGoroutines()...); err != nil {
		fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
		return 1
	}
	return 0
}
