package benchusage

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// PodBytes is the size of the pods the benchmarks change: about 6 KB of JSON
// as the API server serves a Deployment's pod, managedFields included.
const PodBytes = 6 << 10

// PadAnnotation is the annotation that brings a benchmark pod to PodBytes.
const PadAnnotation = "bench.informerhub.io/pad"

// Pod returns a pod shaped like a typical Deployment's, on a node: labels
// and annotations as a controller and a service mesh set them, an
// application container and a sidecar with environment, ports, resources,
// probes and mounts, and volumes. pad bytes of annotation
// (PadAnnotation) bring it to the size wanted; the API server adds its
// defaults, status and managedFields when it is created.
//
// The in-process benchmarks (package informerhub) and the end-to-end
// harness (test/bench) change pods of this shape, so that both measure the
// same objects.
func Pod(namespace, name, node string, labels map[string]string, pad int) *corev1.Pod {
	l := map[string]string{
		"app.kubernetes.io/name":     "checkout",
		"app.kubernetes.io/instance": "checkout-prod",
		"app.kubernetes.io/version":  "2.14.1",
		"pod-template-hash":          "7d9f8c6b5d",
	}
	for k, v := range labels {
		l[k] = v
	}
	annotations := map[string]string{
		"kubectl.kubernetes.io/restartedAt":     "2026-11-20T10:04:05Z",
		"prometheus.io/scrape":                  "true",
		"prometheus.io/port":                    "9090",
		"cluster-autoscaler.kubernetes.io/safe": "true",
	}
	if pad > 0 {
		annotations[PadAnnotation] = padding(pad)
	}
	env := func(names ...string) []corev1.EnvVar {
		var vars []corev1.EnvVar
		for _, n := range names {
			vars = append(vars, corev1.EnvVar{Name: n, Value: "value-of-" + n})
		}
		return vars
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name, Labels: l, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "checkout-7d9f8c6b5d",
				UID: "3b8e8a43-5c1e-4c6f-9a59-0d3f1f6f2c11", Controller: ptr(true), BlockOwnerDeletion: ptr(true),
			}},
		},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{
				{
					Name:  "app",
					Image: "registry.example.com/shop/checkout:2.14.1",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
					Env:   env("LOG_LEVEL", "DATABASE_URL", "CACHE_URL"),
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
					},
					LivenessProbe:  httpProbe("/healthz", 8080),
					ReadinessProbe: httpProbe("/readyz", 8080),
					VolumeMounts: []corev1.VolumeMount{
						{Name: "config", MountPath: "/etc/checkout", ReadOnly: true},
						{Name: "tmp", MountPath: "/tmp"},
					},
				},
				{
					Name:  "proxy",
					Image: "registry.example.com/mesh/proxy:1.24.0",
					Ports: []corev1.ContainerPort{{Name: "http-envoy-prom", ContainerPort: 15090}},
					Env:   env("POD_NAME", "POD_NAMESPACE"),
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")},
					},
					VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/var/run/proxy"}},
				},
			},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "checkout-config"}}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			TerminationGracePeriodSeconds: ptr(int64(30)),
		},
	}
}

func httpProbe(path string, port int) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt(port)}},
		PeriodSeconds: 10, TimeoutSeconds: 1, FailureThreshold: 3,
	}
}

// padding is n bytes of text that JSON does not escape.
func padding(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return string(b)
}

func ptr[T any](v T) *T { return &v }

// NodeName is the name of the i-th node of the benchmarks' node agents.
func NodeName(i int) string { return fmt.Sprintf("node-%05d", i) }
