package chart

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/informerhub/informerhub/export"
)

// isExport reports whether obj is one of informerhub-export's
// (export.enabled).
func isExport(obj *unstructured.Unstructured) bool {
	return obj.GetLabels()["app.kubernetes.io/component"] == "export"
}

// split returns the hub's objects and informerhub-export's.
func split(objs []*unstructured.Unstructured) (hub, exporter []*unstructured.Unstructured) {
	for _, obj := range objs {
		if isExport(obj) {
			exporter = append(exporter, obj)
		} else {
			hub = append(hub, obj)
		}
	}
	return hub, exporter
}

// exportPod returns informerhub-export's Deployment and its one container.
func exportPod(t *testing.T, objs []*unstructured.Unstructured) (*appsv1.Deployment, corev1.Container) {
	t.Helper()
	_, exporter := split(objs)
	var d appsv1.Deployment
	fromUnstructured(t, only(t, exporter, "Deployment"), &d)
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("informerhub-export's pod has %d containers, want 1", n)
	}
	return &d, d.Spec.Template.Spec.Containers[0]
}

// exportConfig returns the configuration file of informerhub-export's
// ConfigMap, and what export.LoadConfig, the command's own reader, makes
// of it.
func exportConfig(t *testing.T, objs []*unstructured.Unstructured) (string, *export.Config) {
	t.Helper()
	_, exporter := split(objs)
	var cm corev1.ConfigMap
	fromUnstructured(t, only(t, exporter, "ConfigMap"), &cm)
	data, ok := cm.Data["config.yaml"]
	if !ok {
		t.Fatalf("the ConfigMap %s has no config.yaml: %v", cm.Name, cm.Data)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := export.LoadConfig(path)
	if err != nil {
		t.Fatalf("informerhub-export would refuse its configuration file: %v\n%s", err, data)
	}
	return data, cfg
}

// mountedAt returns the volume mounted at the directory of path, and
// the mount.
func mountedAt(t *testing.T, pod corev1.PodSpec, c corev1.Container, path string) (corev1.Volume, corev1.VolumeMount) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.MountPath == filepath.Dir(path) {
			for _, v := range pod.Volumes {
				if v.Name == m.Name {
					return v, m
				}
			}
			t.Fatalf("the mount of %s names the volume %s, which the pod does not have", path, m.Name)
		}
	}
	t.Fatalf("nothing is mounted at %s, the directory of %s: %+v", filepath.Dir(path), path, c.VolumeMounts)
	return corev1.Volume{}, corev1.VolumeMount{}
}

// ci/export-values.yaml runs ONE informerhub-export, replaced with
// Recreate, as the command the image holds, from the hub's image, with
// the hub's security context; its ConfigMap holds a file the command
// accepts, whose hub is this release's Service, verified with the hub's
// certificate (alone: not its key) and authenticated with a token
// projected for the hub's audience; its cloudevents route keeps its
// checkpoint on the claim the chart makes; and a change of the file
// changes the pod's checksum annotation, which rolls it.
func TestTheExportRunsOneExporterOfTheRoutes(t *testing.T) {
	_, objs := mustTemplate(t, valuesArgs(t, "ci/export-values.yaml")...)
	hubObjs, exporter := split(objs)
	d, c := exportPod(t, objs)
	pod := d.Spec.Template.Spec

	if r := d.Spec.Replicas; r == nil || *r != 1 {
		t.Errorf("replicas %v, want 1: one exporter per route", ptrString(r))
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || d.Spec.Strategy.RollingUpdate != nil {
		t.Errorf("strategy %+v, want Recreate: never two exporters at once", d.Spec.Strategy)
	}
	if want := []string{"/usr/local/bin/informerhub-export"}; !slices.Equal(c.Command, want) {
		t.Errorf("command %q, want %q (the Dockerfile's)", c.Command, want)
	}
	var hub appsv1.Deployment
	fromUnstructured(t, only(t, hubObjs, "Deployment"), &hub)
	hc := hub.Spec.Template.Spec.Containers[0]
	if c.Image != hc.Image || c.ImagePullPolicy != hc.ImagePullPolicy {
		t.Errorf("image %s (%s), want the hub's, %s (%s)", c.Image, c.ImagePullPolicy, hc.Image, hc.ImagePullPolicy)
	}

	// The hub's security context: non-root, read-only root, no
	// capabilities.
	if diff := cmp.Diff(hub.Spec.Template.Spec.SecurityContext, pod.SecurityContext); diff != "" {
		t.Errorf("the pod's securityContext (-hub +export):\n%s", diff)
	}
	if diff := cmp.Diff(hc.SecurityContext, c.SecurityContext); diff != "" {
		t.Errorf("the container's securityContext (-hub +export):\n%s", diff)
	}
	if sc := c.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("the container's securityContext %+v: want non-root, a read-only root filesystem, no privilege escalation, every capability dropped", sc)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken %v, want false: the exporter never calls the API server", pod.AutomountServiceAccountToken)
	}
	var sa corev1.ServiceAccount
	fromUnstructured(t, only(t, exporter, "ServiceAccount"), &sa)
	if pod.ServiceAccountName != sa.Name || sa.Name == hub.Spec.Template.Spec.ServiceAccountName {
		t.Errorf("service account %s, want its own, %s (the hub's is %s)", pod.ServiceAccountName, sa.Name, hub.Spec.Template.Spec.ServiceAccountName)
	}

	// The file, as the command reads it.
	data, cfg := exportConfig(t, objs)
	args := map[string]string{}
	for _, arg := range c.Args {
		name, value, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		args[name] = value
	}
	if want := map[string]string{"config": args["config"], "metrics-listen": ":9090", "log-level": "info", "log-format": "json"}; !cmp.Equal(args, want) {
		t.Errorf("args %q, want %v", c.Args, want)
	}
	if v, _ := mountedAt(t, pod, c, args["config"]); v.ConfigMap == nil || v.ConfigMap.Name != d.Name || filepath.Base(args["config"]) != "config.yaml" {
		t.Errorf("--config=%s is on the volume %+v, want the ConfigMap %s's config.yaml", args["config"], v, d.Name)
	}
	if cfg.Cluster != "ci" || len(cfg.Routes) != 2 || cfg.Routes[0].JetStream == nil || cfg.Routes[1].CloudEvents == nil {
		t.Errorf("the file's cluster and routes are not ci/export-values.yaml's:\n%s", data)
	}

	// Its hub: this release's Service, on the gRPC port.
	var svc corev1.Service
	for _, obj := range hubObjs {
		if obj.GetKind() == "Service" && obj.GetName() == release {
			fromUnstructured(t, obj, &svc)
		}
	}
	if want := []string{release + "." + namespace + ".svc:8443"}; !slices.Equal(cfg.Hub.Addresses, want) || svc.Spec.Ports[0].Name != "grpc" || svc.Spec.Ports[0].Port != 8443 {
		t.Errorf("hub.addresses %q, want %q, the Service's gRPC port (%+v)", cfg.Hub.Addresses, want, svc.Spec.Ports)
	}
	// Verified with the hub's certificate, as the chart serves it: its
	// TLS Secret's tls.crt, and nothing else of that Secret.
	if cfg.Hub.Insecure || cfg.Hub.CAFile == "" {
		t.Errorf("hub: insecure %v, caFile %q: want TLS, verified", cfg.Hub.Insecure, cfg.Hub.CAFile)
	} else {
		v, m := mountedAt(t, pod, c, cfg.Hub.CAFile)
		var tlsSecret string
		for _, hv := range hub.Spec.Template.Spec.Volumes {
			if hv.Name == "tls" {
				tlsSecret = hv.Secret.SecretName
			}
		}
		if v.Secret == nil || v.Secret.SecretName != tlsSecret || !m.ReadOnly ||
			!cmp.Equal(v.Secret.Items, []corev1.KeyToPath{{Key: "tls.crt", Path: filepath.Base(cfg.Hub.CAFile)}}) {
			t.Errorf("caFile %s is on %+v, want the hub's TLS Secret %s, its tls.crt alone, read-only", cfg.Hub.CAFile, v, tlsSecret)
		}
	}
	// Authenticated with a token for the hub's audience.
	if cfg.Hub.TokenFile == "" {
		t.Error("hub.tokenFile: none, want a projected service account token")
	} else {
		v, m := mountedAt(t, pod, c, cfg.Hub.TokenFile)
		if v.Projected == nil || len(v.Projected.Sources) != 1 || v.Projected.Sources[0].ServiceAccountToken == nil || !m.ReadOnly {
			t.Errorf("tokenFile %s is on %+v, want a projected service account token, read-only", cfg.Hub.TokenFile, v)
		} else if tok := v.Projected.Sources[0].ServiceAccountToken; tok.Audience != "informerhub" || tok.Path != filepath.Base(cfg.Hub.TokenFile) {
			t.Errorf("the token %+v, want the audience informerhub (config.tokenAudience) at %s", tok, cfg.Hub.TokenFile)
		}
	}
	// The cloudevents route's checkpoint, on the claim.
	var pvc corev1.PersistentVolumeClaim
	fromUnstructured(t, only(t, exporter, "PersistentVolumeClaim"), &pvc)
	checkpoint := cfg.Routes[1].CloudEvents.Checkpoint
	if want := "/var/lib/informerhub-export/rolebindings-audit"; checkpoint != want {
		t.Errorf("the checkpoint of rolebindings-audit is %s, want %s (the chart's default: the route's name on the volume)", checkpoint, want)
	}
	if v, m := mountedAt(t, pod, c, checkpoint); v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != pvc.Name || m.ReadOnly {
		t.Errorf("the checkpoint %s is on %+v, want the claim %s, writable", checkpoint, v, pvc.Name)
	}
	if pvc.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the claim's annotations %v: want helm.sh/resource-policy: keep (keepOnUninstall)", pvc.Annotations)
	}

	// A new file rolls the pod; other changes leave the checksum alone.
	sum := d.Spec.Template.Annotations["checksum/config"]
	if h := sha256.Sum256([]byte(strings.TrimSuffix(data, "\n"))); sum != hex.EncodeToString(h[:]) {
		t.Errorf("checksum/config %q is not the file's sha256", sum)
	}
	_, changed := mustTemplate(t, append(valuesArgs(t, "ci/export-values.yaml"), "--set", "export.config.routes[1].cloudevents.mode=binary")...)
	if d2, _ := exportPod(t, changed); d2.Spec.Template.Annotations["checksum/config"] == sum {
		t.Error("a route changed, and checksum/config did not: the pod would keep the old file")
	}
	_, unrelated := mustTemplate(t, append(valuesArgs(t, "ci/export-values.yaml"), "--set", "replicaCount=3")...)
	if d3, _ := exportPod(t, unrelated); d3.Spec.Template.Annotations["checksum/config"] != sum {
		t.Error("the hub's replicas changed, and so did the exporter's checksum/config")
	}
}

// informerhub-export's pods are none of the hub's: no selector of the
// hub's Services, PodDisruptionBudget or ServiceMonitor picks them, and the
// exporter's own pick only them. The hub's objects are the same with the
// export as without, but for the PrometheusRule (the export's alerts) and
// the NetworkPolicy, which lets the exporter in.
func TestTheExportLeavesTheHubAlone(t *testing.T) {
	args := append(valuesArgs(t, "ci/export-values.yaml"), "--set", "networkPolicy.enabled=true")
	_, objs := mustTemplate(t, args...)
	hubObjs, exporter := split(objs)
	d, _ := exportPod(t, objs)
	exportPods := labels.Set(d.Spec.Template.Labels)
	var hub appsv1.Deployment
	fromUnstructured(t, only(t, hubObjs, "Deployment"), &hub)
	hubPods := labels.Set(hub.Spec.Template.Labels)

	for _, obj := range objs {
		var selector map[string]string
		switch obj.GetKind() {
		case "Service":
			var s corev1.Service
			fromUnstructured(t, obj, &s)
			selector = s.Spec.Selector
		case "PodDisruptionBudget":
			var p policyv1.PodDisruptionBudget
			fromUnstructured(t, obj, &p)
			selector = p.Spec.Selector.MatchLabels
		case "ServiceMonitor", "PodMonitor", "Deployment":
			selector, _, _ = unstructured.NestedStringMap(obj.Object, "spec", "selector", "matchLabels")
		default:
			continue
		}
		sel := labels.SelectorFromSet(selector)
		if isExport(obj) != sel.Matches(exportPods) || isExport(obj) == sel.Matches(hubPods) {
			t.Errorf("the %s %s selects %v: the exporter's pods %t, the hub's %t", obj.GetKind(), obj.GetName(), selector, sel.Matches(exportPods), sel.Matches(hubPods))
		}
	}

	_, without := mustTemplate(t, append(args, "--set", "export.enabled=false")...)
	hubWithout, none := split(without)
	if len(none) != 0 {
		t.Errorf("without export.enabled, the chart renders %v of the exporter's", kinds(none))
	}
	byName := func(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
		m := map[string]*unstructured.Unstructured{}
		for _, obj := range objs {
			m[obj.GetKind()+"/"+obj.GetName()] = obj
		}
		return m
	}
	with, wo := byName(hubObjs), byName(hubWithout)
	if diff := cmp.Diff(slices.Sorted(maps.Keys(wo)), slices.Sorted(maps.Keys(with))); diff != "" {
		t.Errorf("the hub's objects (-without +with the export):\n%s", diff)
	}
	for key, obj := range wo {
		if kind := obj.GetKind(); kind == "PrometheusRule" || kind == "NetworkPolicy" {
			continue
		}
		if diff := cmp.Diff(obj.Object, with[key].Object); diff != "" {
			t.Errorf("%s changes with the export (-without +with):\n%s", key, diff)
		}
	}
	var np networkingv1.NetworkPolicy
	fromUnstructured(t, only(t, hubObjs, "NetworkPolicy"), &np)
	let := false
	for _, rule := range np.Spec.Ingress {
		for _, peer := range rule.From {
			if peer.PodSelector != nil && peer.NamespaceSelector == nil && labels.SelectorFromSet(peer.PodSelector.MatchLabels).Matches(exportPods) &&
				len(rule.Ports) == 1 && rule.Ports[0].Port.String() == "grpc" {
				let = true
			}
		}
	}
	if !let {
		t.Errorf("the hub's NetworkPolicy does not let the exporter's pods reach gRPC: %+v", np.Spec.Ingress)
	}
	if got := kinds(exporter); !slices.Contains(got, "ServiceMonitor") {
		t.Errorf("the exporter's objects %v: no ServiceMonitor, though serviceMonitor.enabled", got)
	}
}

// The exporter's RBAC, applied for real: its service account may list and
// watch what ci/export-values.yaml's routes select (the ConfigMaps of the
// namespace default, every RoleBinding), which is what the hub checks of a
// Watch's caller (server/auth: list and watch), and nothing else.
func TestTheExportersRBACIsWhatItsRoutesNeed(t *testing.T) {
	ctx := ctxFor(t)
	const ns = "chart-export"
	_, objs := mustTemplate(t, append(valuesArgs(t, "ci/export-values.yaml"), "--namespace", ns, "--set", "fullnameOverride="+ns)...)
	_, exporter := split(objs)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	var user string
	for _, obj := range exporter {
		var err error
		switch obj.GetKind() {
		case "ServiceAccount":
			var sa corev1.ServiceAccount
			fromUnstructured(t, obj, &sa)
			user = "system:serviceaccount:" + sa.Namespace + ":" + sa.Name
			_, err = kube.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, &sa, metav1.CreateOptions{})
		case "ClusterRole":
			var r rbacv1.ClusterRole
			fromUnstructured(t, obj, &r)
			_, err = kube.RbacV1().ClusterRoles().Create(ctx, &r, metav1.CreateOptions{})
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			fromUnstructured(t, obj, &b)
			_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &b, metav1.CreateOptions{})
		case "Role":
			var r rbacv1.Role
			fromUnstructured(t, obj, &r)
			_, err = kube.RbacV1().Roles(r.Namespace).Create(ctx, &r, metav1.CreateOptions{})
		case "RoleBinding":
			var b rbacv1.RoleBinding
			fromUnstructured(t, obj, &b)
			_, err = kube.RbacV1().RoleBindings(b.Namespace).Create(ctx, &b, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if user == "" {
		t.Fatal("the exporter has no ServiceAccount")
	}
	allowed := func(verb, group, resource, namespace string) bool {
		sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Namespace: namespace},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	for _, tt := range []struct {
		verb, group, resource, namespace string
		want                             bool
	}{
		// What the routes select.
		{"list", "", "configmaps", "default", true},
		{"watch", "", "configmaps", "default", true},
		{"list", "rbac.authorization.k8s.io", "rolebindings", "", true},
		{"watch", "rbac.authorization.k8s.io", "rolebindings", "", true},
		// Nothing more.
		{"list", "", "configmaps", "kube-system", false},
		{"list", "", "configmaps", "", false},
		{"get", "", "configmaps", "default", false},
		{"list", "", "secrets", "default", false},
		{"list", "rbac.authorization.k8s.io", "clusterrolebindings", "", false},
		{"create", "rbac.authorization.k8s.io", "rolebindings", "default", false},
	} {
		if got := allowed(tt.verb, tt.group, tt.resource, tt.namespace); got != tt.want {
			t.Errorf("%s may %s %s.%s in %q: %t, want %t", user, tt.verb, tt.resource, tt.group, tt.namespace, got, tt.want)
		}
	}
}

// The chart's export settings, beside ci/export-values.yaml's: the hub
// without TLS (auth none) is reached in plaintext without a token; a
// cloudevents route's checkpoint set by hand on the volume is kept;
// without persistence the checkpoints are an emptyDir; an image of its
// own; RBAC left to the operator.
func TestTheExportFollowsTheHubsSettings(t *testing.T) {
	base := valuesArgs(t, "ci/export-values.yaml")
	t.Run("plaintext, no authentication", func(t *testing.T) {
		_, objs := mustTemplate(t, append(base, "--set", "tls.enabled=false", "--set", "config.insecureAllowRemotePlaintext=true",
			"--set", "config.auth=none", "--set", "config.insecureAllowRemoteUnauthenticated=true")...)
		_, cfg := exportConfig(t, objs)
		if !cfg.Hub.Insecure || cfg.Hub.CAFile != "" || cfg.Hub.TokenFile != "" {
			t.Errorf("hub %+v: want insecure, no caFile, no tokenFile", cfg.Hub)
		}
		_, c := exportPod(t, objs)
		if len(c.VolumeMounts) != 2 {
			t.Errorf("mounts %+v: want the config and the checkpoints only", c.VolumeMounts)
		}
	})
	t.Run("cert-manager's ca.crt, a checkpoint set by hand, no volume, an image of its own, no RBAC", func(t *testing.T) {
		_, objs := mustTemplate(t, append(base, "--set", "export.hubCA.key=ca.crt", "--set", "export.hubCA.secretName=hub-ca",
			"--set", "export.config.routes[1].cloudevents.checkpoint=/var/lib/informerhub-export/audit",
			"--set", "export.checkpoints.persistence.enabled=false", "--set", "export.image.repository=registry.example.com/exporter",
			"--set", "export.image.tag=v2", "--set", "export.rbac.create=false")...)
		_, cfg := exportConfig(t, objs)
		d, c := exportPod(t, objs)
		if v, _ := mountedAt(t, d.Spec.Template.Spec, c, cfg.Hub.CAFile); filepath.Base(cfg.Hub.CAFile) != "ca.crt" || v.Secret == nil || v.Secret.SecretName != "hub-ca" {
			t.Errorf("caFile %s on %+v: want hub-ca's ca.crt", cfg.Hub.CAFile, v)
		}
		checkpoint := cfg.Routes[1].CloudEvents.Checkpoint
		if v, _ := mountedAt(t, d.Spec.Template.Spec, c, checkpoint); checkpoint != "/var/lib/informerhub-export/audit" || v.EmptyDir == nil {
			t.Errorf("the checkpoint %s on %+v: want /var/lib/informerhub-export/audit on an emptyDir", checkpoint, v)
		}
		if c.Image != "registry.example.com/exporter:v2" {
			t.Errorf("image %s, want registry.example.com/exporter:v2", c.Image)
		}
		_, exporter := split(objs)
		for _, kind := range kinds(exporter) {
			if kind == "PersistentVolumeClaim" || strings.Contains(kind, "Role") {
				t.Errorf("a %s, with no persistence and export.rbac.create=false", kind)
			}
		}
	})
}

func ptrString(p *int32) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}
