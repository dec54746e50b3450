package chart

import (
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The ClusterRole is least privilege, and enough: as the chart's service
// account, with the ClusterRole ci/durable-values.yaml renders (a few
// resource types, the history on disk) applied for real, the hub's
// identity may list and watch those types and no others, list the
// namespace kube-system as --history-dir does (to name the cluster) but
// not every namespace's objects beyond its types, and create TokenReviews
// and SubjectAccessReviews, but read no Secret.
func TestTheClusterRoleIsLeastPrivilege(t *testing.T) {
	ctx := ctxFor(t)
	_, objs := mustTemplate(t, append(valuesArgs(t, "ci/durable-values.yaml"), "--namespace", "chart-rbac", "--set", "fullnameOverride=chart-rbac")...)
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	fromUnstructured(t, only(t, objs, "ClusterRole"), &role)
	fromUnstructured(t, only(t, objs, "ClusterRoleBinding"), &binding)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "chart-rbac"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sa := binding.Subjects[0]
	if _, err := kube.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa.Name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := kube.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hub := kubernetes.NewForConfigOrDie(&rest.Config{Host: cluster.Config.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: cluster.Config.CAData}})

	// What the hub does with it: list and watch its types, list the one
	// namespace that names the cluster, review callers.
	if _, err := hub.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		t.Errorf("listing configmaps: %v", err)
	}
	if _, err := hub.AppsV1().Deployments("").List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		t.Errorf("listing deployments: %v", err)
	}
	w, err := hub.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("watching pods: %v", err)
	} else {
		w.Stop()
	}
	if list, err := hub.CoreV1().Namespaces().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=kube-system"}); err != nil || len(list.Items) != 1 {
		t.Errorf("listing the namespace kube-system, as --history-dir does: %v", err)
	}
	if _, err := hub.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "x"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("creating a TokenReview: %v", err)
	}
	// What it may not.
	if _, err := hub.CoreV1().Secrets("").List(ctx, metav1.ListOptions{Limit: 1}); !apierrors.IsForbidden(err) {
		t.Errorf("listing secrets: %v, want Forbidden (not among rbac.resources)", err)
	}
	if _, err := hub.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("getting a configmap: %v, want Forbidden (list and watch only)", err)
	}
	if _, err := hub.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("creating a configmap: %v, want Forbidden", err)
	}

	// Without the history on disk, no rule on namespaces beyond those the
	// operator names; with auth none, no reviews.
	_, objs = mustTemplate(t, "--set", "config.auth=none", "--set", "config.insecureAllowRemoteUnauthenticated=true")
	fromUnstructured(t, only(t, objs, "ClusterRole"), &role)
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, "authentication.k8s.io") || slices.Contains(r.APIGroups, "authorization.k8s.io") || slices.Contains(r.ResourceNames, "kube-system") {
			t.Errorf("with config.auth=none and no durableHistory, the ClusterRole has %+v", r)
		}
		if !slices.Contains(r.Verbs, "list") || strings.Join(r.Verbs, ",") != "list,watch" {
			t.Errorf("rule %+v: want list and watch only", r)
		}
	}
}
