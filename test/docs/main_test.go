package docs

import (
	"os"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/informerhub/informerhub/internal/controlplane"
)

var (
	cluster *controlplane.ControlPlane
	kube    kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(controlplane.Main(m, func(c *controlplane.ControlPlane) {
		cluster = c
		cfg := rest.CopyConfig(c.Config)
		cfg.QPS, cfg.Burst = 100, 100 // waitForHub polls
		kube = kubernetes.NewForConfigOrDie(cfg)
	}))
}
