package integration

import (
	"testing"

	"github.com/informerhub/informerhub/internal/testhub"
)

// startHubProcess runs the hub binary against the shared control plane, so
// that a test can kill it as a node failure would: SIGKILL, no shutdown of
// any kind.
func startHubProcess(t *testing.T, extraArgs ...string) *testhub.Process {
	t.Helper()
	return testhub.Start(t, cluster.KubeConfig, extraArgs...)
}
