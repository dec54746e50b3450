package deploy

import (
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/informerhub/informerhub/internal/testhub"
)

// The hub accepts the Deployment's arguments exactly as they are: every
// flag exists, and together they pass its checks (TLS on a non-loopback
// address, for one). --version makes it stop right after.
func TestDeploymentFlagsAreValid(t *testing.T) {
	k := newKubectl(t)
	var d appsv1.Deployment
	fromUnstructured(t, only(t, k.render(t, filepath.Join(repoRoot(t), "deploy")), "Deployment")[0], &d)
	bin := testhub.Build(t, "github.com/informerhub/informerhub/cmd/informerhub")
	args := append(d.Spec.Template.Spec.Containers[0].Args, "--version")
	out, err := exec.CommandContext(ctxFor(t), bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("informerhub %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// What the API server does not check: the objects agree with each other
// and with the hub's flags.
func TestDeploymentIsConsistent(t *testing.T) {
	k := newKubectl(t)
	objs := k.render(t, filepath.Join(repoRoot(t), "deploy"))
	var (
		d      appsv1.Deployment
		pdb    policyv1.PodDisruptionBudget
		policy networkingv1.NetworkPolicy
	)
	fromUnstructured(t, only(t, objs, "Deployment")[0], &d)
	fromUnstructured(t, only(t, objs, "PodDisruptionBudget")[0], &pdb)
	fromUnstructured(t, only(t, objs, "NetworkPolicy")[0], &policy)
	pod := d.Spec.Template
	c := pod.Spec.Containers[0]
	flags := map[string]string{}
	for _, arg := range c.Args {
		name, value, _ := strings.Cut(arg, "=")
		flags[name] = value
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}

	// Ports: the named container ports are where the hub listens.
	for flag, port := range map[string]string{"--listen": "grpc", "--metrics-listen": "metrics"} {
		_, listenPort, err := net.SplitHostPort(flags[flag])
		if err != nil {
			t.Errorf("%s=%s: %v", flag, flags[flag], err)
			continue
		}
		if want := ports[port]; listenPort != strconv.Itoa(int(want)) {
			t.Errorf("%s=%s, but container port %s is %d", flag, flags[flag], port, want)
		}
	}

	// The TLS files are in the mounted Secret informerhub-tls.
	var tlsMount string
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == "informerhub-tls" {
				tlsMount = m.MountPath
			}
		}
	}
	if tlsMount == "" {
		t.Error("the Secret informerhub-tls is not mounted")
	}
	for _, flag := range []string{"--tls-cert", "--tls-key"} {
		if filepath.Dir(flags[flag]) != tlsMount {
			t.Errorf("%s=%s is not in the Secret's mount %s", flag, flags[flag], tlsMount)
		}
	}

	// Shutdown: the kubelet waits for the preStop hook and the hub's
	// --shutdown-drain and --shutdown-timeout before it kills the hub.
	var shutdown time.Duration
	for _, flag := range []string{"--shutdown-drain", "--shutdown-timeout"} {
		d := 10 * time.Second // the hub's default
		if v, ok := flags[flag]; ok {
			var err error
			if d, err = time.ParseDuration(v); err != nil {
				t.Fatalf("%s=%s: %v", flag, v, err)
			}
		}
		shutdown += d
	}
	var preStop time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	if grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second; grace <= preStop+shutdown {
		t.Errorf("terminationGracePeriodSeconds %v leaves no time after the preStop sleep (%v), --shutdown-drain and --shutdown-timeout (%v)", grace, preStop, shutdown)
	}

	// Selectors: the Services, the PodDisruptionBudget and the
	// NetworkPolicy select the hub's pods, and name its ports.
	podLabels := labels.Set(pod.Labels)
	selects := func(what string, sel *metav1.LabelSelector) {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || s.Empty() || !s.Matches(podLabels) {
			t.Errorf("%s selects %v, not the hub's pods (%v): %v", what, sel, podLabels, err)
		}
	}
	selects("the Deployment", d.Spec.Selector)
	selects("the PodDisruptionBudget", pdb.Spec.Selector)
	selects("the NetworkPolicy", &policy.Spec.PodSelector)
	headless := 0
	for _, obj := range objs {
		if obj.GetKind() != "Service" {
			continue
		}
		var svc corev1.Service
		fromUnstructured(t, obj, &svc)
		selects("Service "+svc.Name, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector})
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			headless++
		}
		for _, p := range svc.Spec.Ports {
			if _, ok := ports[p.TargetPort.String()]; !ok {
				t.Errorf("Service %s port %s targets %s, not a named port of the container", svc.Name, p.Name, p.TargetPort.String())
			}
		}
	}
	if headless != 1 {
		t.Errorf("%d headless Services, want 1 (for gRPC's dns resolver)", headless)
	}
	for _, rule := range policy.Spec.Ingress {
		for _, p := range rule.Ports {
			if _, ok := ports[p.Port.String()]; !ok {
				t.Errorf("the NetworkPolicy admits port %s, not a named port of the container", p.Port.String())
			}
		}
	}

	// The image's tag comes from kustomization.yaml's images.
	if want := "ghcr.io/informerhub/informerhub:dev"; c.Image != want {
		t.Errorf("image %s, want %s", c.Image, want)
	}
}
