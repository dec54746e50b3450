package integration

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/server"
)

// podCounts are the counts of a LIST of pods, grouped as group says.
func podCounts(pods []corev1.Pod, group func(corev1.Pod) string) *informerhubv1.CountResponse {
	want := &informerhubv1.CountResponse{Groups: map[string]uint64{}}
	for _, p := range pods {
		want.Total++
		want.Groups[group(p)]++
	}
	return want
}

// podGroupings are the groupings the tests count pods by, each with how
// the API server's objects group so.
var podGroupings = map[string]func(corev1.Pod) string{
	"namespace":    func(p corev1.Pod) string { return p.Namespace },
	"label:app":    func(p corev1.Pod) string { return p.Labels["app"] },
	"status.phase": func(p corev1.Pod) string { return string(p.Status.Phase) },
}

// countStream is a Count read in the background, with the counts it
// received last.
type countStream struct {
	r    *streamReader[informerhubv1.CountResponse]
	last *informerhubv1.CountResponse
}

func openCount(t *testing.T, ctx context.Context, client informerhubv1.InformerHubServiceClient, req *informerhubv1.CountRequest) *countStream {
	t.Helper()
	stream, err := client.Count(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return &countStream{r: readStream(stream.Recv)}
}

// await reads the stream until the counts it received last are want. The
// hub sends counts only when they change: those received last count too.
// The bound is generous, and not synchronisation: it turns a hang into a
// failure that says what the counts were.
func (c *countStream) await(t *testing.T, what string, want *informerhubv1.CountResponse) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		if c.last != nil && maps.Equal(c.last.Groups, want.Groups) && c.last.Total == want.Total {
			return
		}
		select {
		case resp, ok := <-c.r.responses:
			if !ok {
				t.Fatalf("%s: the stream ended: %v", what, <-c.r.err)
			}
			if resp.ResourceVersion == "" {
				t.Fatalf("%s: counts without a resourceVersion", what)
			}
			for g, n := range resp.Groups {
				if n == 0 {
					t.Fatalf("%s: group %q at zero", what, g)
				}
			}
			c.last = resp
		case <-timeout:
			var got any = "nothing"
			if c.last != nil {
				got = map[string]any{"groups": c.last.Groups, "total": c.last.Total}
			}
			t.Fatalf("%s: the counts did not become the API server's within a minute (-API server +hub):\n%s",
				what, cmp.Diff(map[string]any{"groups": want.Groups, "total": want.Total}, got))
		}
	}
}

// TestCountFollowsChurn counts pods labelled for this test, cluster-wide
// by namespace, by a label and by phase, and in one namespace by label,
// through bursts of random creations, label changes, status changes (the
// status subresource: without a kubelet, pods stay Pending otherwise) and
// deletions across three namespaces. After each burst, every stream's
// counts become those of the API server's own LIST of the same selection.
func TestCountFollowsChurn(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	nss := []string{namespace(t), namespace(t), namespace(t)}
	id := fmt.Sprint(namespaces.Add(1))
	selector := "count-test=" + id
	apps := []string{"web", "db", "cache", ""} // "": no label

	h := startHub(t, informerhub.Config{CountInterval: 50 * time.Millisecond})
	ctx := ctxFor(t)
	type counted struct {
		name  string
		ns    string
		group func(corev1.Pod) string
		s     *countStream
	}
	var streams []counted
	for groupBy, group := range podGroupings {
		sel := &informerhubv1.ResourceSelector{Version: "v1", Resource: "pods", LabelSelector: selector}
		streams = append(streams, counted{name: "cluster-wide by " + groupBy, group: group,
			s: openCount(t, ctx, h.client, &informerhubv1.CountRequest{Selector: sel, GroupBy: groupBy})})
	}
	inOne := &informerhubv1.ResourceSelector{Version: "v1", Resource: "pods", Namespace: nss[0], LabelSelector: selector}
	streams = append(streams, counted{name: "in " + nss[0] + " by label:app", ns: nss[0], group: podGroupings["label:app"],
		s: openCount(t, ctx, h.client, &informerhubv1.CountRequest{Selector: inOne, GroupBy: "label:app"})})

	type pod struct{ ns, name string }
	var live []pod
	next := 0
	labelsOf := func(app string) map[string]string {
		labels := map[string]string{"count-test": id}
		if app != "" {
			labels["app"] = app
		}
		return labels
	}
	create := func() {
		p := pod{nss[rng.IntN(len(nss))], fmt.Sprint("p-", next)}
		next++
		if _, err := kube.CoreV1().Pods(p.ns).Create(bgCtx(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: labelsOf(apps[rng.IntN(len(apps))])},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		live = append(live, p)
	}
	get := func(p pod) *corev1.Pod {
		got, err := kube.CoreV1().Pods(p.ns).Get(bgCtx(), p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	relabel := func(p pod) {
		got := get(p)
		got.Labels = labelsOf(apps[rng.IntN(len(apps))])
		if _, err := kube.CoreV1().Pods(p.ns).Update(bgCtx(), got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Pending, then Running, then Succeeded or Failed, where a pod stays:
	// the API server refuses to take a pod out of a terminal phase.
	advance := func(p pod) {
		got := get(p)
		switch got.Status.Phase {
		case corev1.PodPending, "":
			got.Status.Phase = corev1.PodRunning
		case corev1.PodRunning:
			got.Status.Phase = []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed}[rng.IntN(2)]
		default:
			return
		}
		if _, err := kube.CoreV1().Pods(p.ns).UpdateStatus(bgCtx(), got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	remove := func(i int) {
		p := live[i]
		var now int64
		if err := kube.CoreV1().Pods(p.ns).Delete(bgCtx(), p.name, metav1.DeleteOptions{GracePeriodSeconds: &now}); err != nil {
			t.Fatal(err)
		}
		live = append(live[:i], live[i+1:]...)
	}
	list := func(ns string) []corev1.Pod {
		pods, err := kube.CoreV1().Pods(ns).List(bgCtx(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		return pods.Items
	}
	check := func(what string) {
		t.Helper()
		all := list("")
		for _, c := range streams {
			pods := all
			if c.ns != "" {
				pods = list(c.ns)
			}
			c.s.await(t, what+": "+c.name, podCounts(pods, c.group))
		}
	}

	for range 12 {
		create()
	}
	check("the first pods")
	for burst := range 4 {
		for range 40 {
			switch op := rng.IntN(10); {
			case op < 3 || len(live) == 0:
				create()
			case op < 5:
				relabel(live[rng.IntN(len(live))])
			case op < 8:
				advance(live[rng.IntN(len(live))])
			default:
				remove(rng.IntN(len(live)))
			}
		}
		check(fmt.Sprintf("burst %d", burst))
	}
	// At the end, everything goes: every group leaves.
	for len(live) > 0 {
		remove(0)
	}
	check("all deleted")
}

// TestCountCountsOnlyWhatTheCallerMayList: a caller allowed to list and
// watch pods in one namespace counts that namespace; a cluster-wide Count,
// or one of another namespace, is PERMISSION_DENIED.
func TestCountCountsOnlyWhatTheCallerMayList(t *testing.T) {
	mine, other := namespace(t), namespace(t)
	for _, ns := range []string{mine, other} {
		for i, app := range []string{"web", "web", "db"} {
			if _, err := kube.CoreV1().Pods(ns).Create(bgCtx(), &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("p-", i), Labels: map[string]string{"app": app}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	token := serviceAccountToken(t, mine, "counter")
	grant(t, mine, serviceAccount(mine, "counter"), "pods")
	h := startAuthHub(t, server.Config{})

	pods := func(ns string) *informerhubv1.ResourceSelector {
		return &informerhubv1.ResourceSelector{Version: "v1", Resource: "pods", Namespace: ns}
	}
	s := openCount(t, withBearer(t, token), h.client, &informerhubv1.CountRequest{Selector: pods(mine), GroupBy: "label:app"})
	list, err := kube.CoreV1().Pods(mine).List(bgCtx(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := podCounts(list.Items, podGroupings["label:app"])
	if !cmp.Equal(want.Groups, map[string]uint64{"web": 2, "db": 1}) {
		t.Fatalf("the API server lists %v in %s", want.Groups, mine)
	}
	s.await(t, "its own namespace", want)

	for name, sel := range map[string]*informerhubv1.ResourceSelector{"cluster-wide": pods(""), "another namespace": pods(other)} {
		denied := openCount(t, withBearer(t, token), h.client, &informerhubv1.CountRequest{Selector: sel, GroupBy: "namespace"})
		err := denied.r.end(t)
		if status.Code(err) != codes.PermissionDenied || errorInfo(t, err).Reason != server.ReasonForbidden {
			t.Fatalf("%s: %v, want PERMISSION_DENIED, FORBIDDEN", name, err)
		}
		if got := errorInfo(t, err).Metadata["namespace"]; got != sel.Namespace {
			t.Errorf("%s: ErrorInfo names namespace %q, want %q", name, got, sel.Namespace)
		}
	}
}
