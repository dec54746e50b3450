// Package controlplane starts a local Kubernetes control plane, a real
// kube-apiserver and etcd, for integration tests and `make run`.
//
// The binaries are built from source by `make controlplane` (see
// tools/controlplane) into .cache/controlplane/<Version>; KUBEBUILDER_ASSETS
// overrides where they are looked for. controller-runtime's envtest starts
// and stops them.
//
// For fault-injection tests, ControlPlane.StartAPIServer starts a second
// kube-apiserver on the same etcd that a test can kill (SIGKILL) and restart
// without disturbing the shared one, and ControlPlane.Compact compacts etcd
// so that old resourceVersions expire (410 Gone).
package controlplane
