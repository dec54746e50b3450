package chart

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// One pod spec: the chart with its default values renders deploy/'s
// container exactly (image aside: kustomize's images: and the chart's
// image values name it), and the pod settings around it; with
// durableHistory, deploy/durable's. Arguments compare as a set: their
// order means nothing to the hub, and the chart renders its config in
// alphabetical order.
func TestTheChartAndDeployRenderTheSamePod(t *testing.T) {
	k := newKubectl(t)
	for _, tt := range []struct {
		name, kustomization string
		values              []string
	}{
		{"deploy/ and the defaults", "deploy", nil},
		{"deploy/durable and durableHistory", filepath.Join("deploy", "durable"),
			[]string{"--set", "durableHistory.enabled=true", "--set", "resources.limits.memory=1216Mi"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kustomized := k.render(t, filepath.Join(repoRoot(t), tt.kustomization))
			_, charted := mustTemplate(t, tt.values...)
			var want, got corev1.PodTemplateSpec
			var wantClaims, gotClaims []corev1.PersistentVolumeClaim
			if tt.values == nil {
				var d, c appsv1.Deployment
				fromUnstructured(t, only(t, kustomized, "Deployment"), &d)
				fromUnstructured(t, only(t, charted, "Deployment"), &c)
				want, got = d.Spec.Template, c.Spec.Template
			} else {
				var d, c appsv1.StatefulSet
				fromUnstructured(t, only(t, kustomized, "StatefulSet"), &d)
				fromUnstructured(t, only(t, charted, "StatefulSet"), &c)
				want, got = d.Spec.Template, c.Spec.Template
				wantClaims, gotClaims = d.Spec.VolumeClaimTemplates, c.Spec.VolumeClaimTemplates
				if d.Spec.PodManagementPolicy != c.Spec.PodManagementPolicy || !cmp.Equal(d.Spec.PersistentVolumeClaimRetentionPolicy, c.Spec.PersistentVolumeClaimRetentionPolicy) {
					t.Errorf("the StatefulSets differ: pod management %s and %s, claim retention %+v and %+v",
						d.Spec.PodManagementPolicy, c.Spec.PodManagementPolicy, d.Spec.PersistentVolumeClaimRetentionPolicy, c.Spec.PersistentVolumeClaimRetentionPolicy)
				}
			}
			if len(want.Spec.Containers) != 1 || len(got.Spec.Containers) != 1 {
				t.Fatalf("%d and %d containers, want 1 each", len(want.Spec.Containers), len(got.Spec.Containers))
			}
			wc, gc := want.Spec.Containers[0], got.Spec.Containers[0]
			wc.Image, gc.Image = "", ""
			slices.Sort(wc.Args)
			slices.Sort(gc.Args)
			if diff := cmp.Diff(wc, gc); diff != "" {
				t.Errorf("the hub's container (-%s +chart):\n%s", tt.kustomization, diff)
			}
			// The pod around it, but for what names the release: labels,
			// and selectors of them.
			ws, gs := want.Spec, got.Spec
			for _, s := range []*corev1.PodSpec{&ws, &gs} {
				s.Containers = nil
				for i := range s.TopologySpreadConstraints {
					s.TopologySpreadConstraints[i].LabelSelector = nil
				}
				for i := range s.Volumes {
					if s.Volumes[i].Secret != nil && s.Volumes[i].Name == "tls" {
						s.Volumes[i].Secret.SecretName = "" // the release's
					}
				}
			}
			if diff := cmp.Diff(ws, gs); diff != "" {
				t.Errorf("the pod (-%s +chart):\n%s", tt.kustomization, diff)
			}
			if diff := cmp.Diff(want.Annotations, got.Annotations); diff != "" {
				t.Errorf("the pod's annotations (-%s +chart):\n%s", tt.kustomization, diff)
			}
			// The volume claims: names and specs (their labels name the
			// release).
			claims := func(pvcs []corev1.PersistentVolumeClaim) map[string]corev1.PersistentVolumeClaimSpec {
				m := map[string]corev1.PersistentVolumeClaimSpec{}
				for _, pvc := range pvcs {
					m[pvc.Name] = pvc.Spec
				}
				return m
			}
			if diff := cmp.Diff(claims(wantClaims), claims(gotClaims)); diff != "" {
				t.Errorf("the volume claims (-%s +chart):\n%s", tt.kustomization, diff)
			}
		})
	}
}
