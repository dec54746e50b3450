package chart

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// What cannot work is refused before anything reaches the cluster, with a
// message that says what to do: by values.schema.json (a misspelt or
// mistyped value) or by the chart's own checks.
func TestTheChartRefusesMistakes(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  []string
		want string
	}{
		{"a misspelt flag", []string{"config.histroySize=10"}, "additional properties 'histroySize' not allowed"},
		{"a flag of the wrong type", []string{"config.historySize=many"}, "/config/historySize"},
		{"a duration without a unit", []string{"config.idleTimeout=5"}, "/config/idleTimeout"},
		{"an unknown way to authenticate", []string{"config.auth=ldap"}, "/config/auth"},
		{"both monitors", []string{"serviceMonitor.enabled=true", "podMonitor.enabled=true"}, "choose one"},
		{"mTLS without its CAs", []string{"config.auth=mtls"}, "tls.clientCA.secretName"},
		{"plaintext by accident", []string{"tls.enabled=false"}, "config.insecureAllowRemotePlaintext"},
		{"no authentication by accident", []string{"config.auth=none"}, "config.insecureAllowRemoteUnauthenticated"},
		{"an export without a cluster", []string{"export.enabled=true", "export.config.routes[0].name=a",
			"export.config.routes[0].selector.version=v1", "export.config.routes[0].selector.resource=pods",
			"export.config.routes[0].cloudevents.url=http://x"}, "export.config.cluster: required"},
		{"an export without routes", []string{"export.enabled=true", "export.config.cluster=prod"}, "export.config.routes: none"},
		{"an export with mTLS", []string{"export.enabled=true", "export.config.cluster=prod", "export.config.routes[0].name=a",
			"export.config.routes[0].selector.version=v1", "export.config.routes[0].selector.resource=pods",
			"export.config.routes[0].cloudevents.url=http://x", "config.auth=mtls", "tls.clientCA.secretName=ca"}, "has no client certificate"},
		{"the export's hub set by hand", []string{"export.config.hub.addresses[0]=elsewhere:8443"}, "additional properties 'hub' not allowed"},
		{"a route with two sinks", []string{"export.config.routes[0].name=a", "export.config.routes[0].selector.version=v1",
			"export.config.routes[0].selector.resource=pods", "export.config.routes[0].cloudevents.url=http://x",
			"export.config.routes[0].jetstream.stream=S", "export.config.routes[0].jetstream.subject=s"}, "/export/config/routes/0"},
		{"a misspelt sink", []string{"export.config.routes[0].name=a", "export.config.routes[0].selector.version=v1",
			"export.config.routes[0].selector.resource=pods", "export.config.routes[0].jetsream.stream=S"}, "additional properties 'jetsream' not allowed"},
		{"a checkpoint off the volume", []string{"export.enabled=true", "export.config.cluster=prod", "export.config.routes[0].name=a",
			"export.config.routes[0].selector.version=v1", "export.config.routes[0].selector.resource=pods",
			"export.config.routes[0].cloudevents.url=http://x", "export.config.routes[0].cloudevents.checkpoint=/tmp/a"},
			"is not a file of export.checkpoints.mountPath"},
		{"a jetstream route without NATS", []string{"-f", filepath.Join(chartDir(t), "ci", "export-values.yaml"), "export.config.nats=null"},
			"a jetstream route needs export.config.nats.url"},
		{"an export RBAC rule of more than list and watch", []string{"export.rbac.rules[0].apiGroups[0]=", "export.rbac.rules[0].resources[0]=pods",
			"export.rbac.rules[0].verbs[0]=get"}, "additional properties 'verbs' not allowed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var args []string
			for i := 0; i < len(tt.set); i++ {
				if tt.set[i] == "-f" { // a values file, then --set
					args = append(args, "-f", tt.set[i+1])
					i++
					continue
				}
				args = append(args, "--set", tt.set[i])
			}
			_, err := helmTemplate(t, args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("helm template --set %v: %v, want an error saying %s", tt.set, err, tt.want)
			}
		})
	}
}

// NOTES.txt tells how to reach the hub and the console, in each mode.
func TestNotesTellHowToReachTheHub(t *testing.T) {
	k := newKubectl(t)
	installMonitoringCRDs(t, k) // helm maps every kind it installs
	for _, tt := range []struct {
		name   string
		values []string
		want   []string
	}{
		{"defaults", nil, []string{
			"kubectl -n informerhub create secret tls informerhub-tls",
			"informerhub.informerhub.svc:8443",
			"dns:///informerhub-headless.informerhub.svc.cluster.local:8443",
			"kubectl -n informerhub port-forward service/informerhub 8443:8443 9090:9090",
			"kubectl -n <namespace> create token <serviceaccount> --audience informerhub",
			"serviceAccountToken: {audience: informerhub, expirationSeconds: 3600, path: token}",
			"set config.console=true",
		}},
		{"deployment", []string{"-f", "ci/deployment-values.yaml"}, []string{
			"open https://localhost:8443/ and sign in with a token for the audience \"informerhub\"",
			"The ServiceMonitor informerhub/informerhub",
			"The PrometheusRule informerhub/informerhub",
			"docs/runbook.md",
			"The ConfigMap informerhub/informerhub-dashboard",
		}},
		{"durable", []string{"-f", "ci/durable-values.yaml"}, []string{
			"the StatefulSet informerhub/informerhub",
			"each with its history on its own 20Gi volume",
			"rollout status statefulset/informerhub",
			"The PodMonitor informerhub/informerhub",
		}},
		{"mtls", []string{"-f", "ci/mtls-values.yaml"}, []string{
			"a client certificate signed by a CA of the Secret informerhub/hub-client-ca",
			"-cert client.crt -key client.key",
		}},
		{"export", []string{"-f", "ci/export-values.yaml"}, []string{
			"The Deployment informerhub/informerhub-export runs ONE informerhub-export (strategy Recreate",
			"the 2 routes of the ConfigMap informerhub/informerhub-export",
			"account informerhub/informerhub-export: it needs list and watch",
			"kubectl -n informerhub logs deployment/informerhub-export",
			"The cloudevents routes (rolebindings-audit) keep their resume points in /var/lib/informerhub-export, on the volume claim\ninformerhub/informerhub-export-checkpoints.",
		}},
		{"export without a volume", []string{"-f", "ci/export-values.yaml", "--set", "export.checkpoints.persistence.enabled=false"}, []string{
			"WARNING: the cloudevents routes (rolebindings-audit) keep their resume points on an emptyDir",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// A dry run against the control plane: helm reads its version
			// and API groups from there, and installs nothing.
			args := []string{"install", release, chartDir(t), "--namespace", namespace, "--dry-run=server", "--kubeconfig", k.kubeconfig}
			for i, v := range tt.values {
				if i > 0 && tt.values[i-1] == "-f" {
					v = filepath.Join(chartDir(t), v)
				}
				args = append(args, v)
			}
			out, err := exec.CommandContext(ctxFor(t), tool(t, "helm"), args...).CombinedOutput()
			if err != nil {
				t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			notes := string(out)[strings.Index(string(out), "NOTES:"):]
			for _, want := range tt.want {
				if !strings.Contains(notes, want) {
					t.Errorf("NOTES.txt does not say %q:\n%s", want, notes)
				}
			}
		})
	}
}
