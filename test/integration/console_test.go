package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/server"
)

// gadgetCRD is a namespaced CRD of group, whose v1 has printer columns:
// two shown by default (Color, Size), one with -o wide only (Shape), and
// Age.
func gadgetCRD(group string) *unstructured.Unstructured {
	prop := func(typ string) map[string]any { return map[string]any{"type": typ} }
	column := func(name, typ, path string, priority int64) map[string]any {
		return map[string]any{"name": name, "type": typ, "jsonPath": path, "priority": priority}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "gadgets." + group},
		"spec": map[string]any{
			"group": group, "scope": "Namespaced",
			"names": map[string]any{"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"additionalPrinterColumns": []any{
					column("Color", "string", ".spec.color", 0),
					column("Size", "integer", ".spec.size", 0),
					column("Shape", "string", ".spec.shape", 1),
					column("Age", "date", ".metadata.creationTimestamp", 0),
				},
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "properties": map[string]any{
					"spec": map[string]any{"type": "object", "properties": map[string]any{
						"color": prop("string"), "size": prop("integer"), "shape": prop("string"),
					}},
				}}},
			}},
		},
	}}
}

// TestConsoleSidebarColumnsYAMLAndDiff drives the console in headless
// Chromium against the API server: the sidebar lists the types the token
// may read, with counts (when asked) equal to the API server's LIST; the namespace
// picker suggests the namespaces; pods and a custom resource show kubectl's
// columns (a CRD's additionalPrinterColumns); an object shows as YAML
// without managedFields until asked; a one-line data change shows as one
// line, in view, the bookkeeping folded; and several types watch over one
// WatchMany. It measures the page's first paint, the time from Start to
// the first row, and from a write to the row changing, in the browser, and
// logs them (and writes them to timings.txt); it asserts nothing on them.
func TestConsoleSidebarColumnsYAMLAndDiff(t *testing.T) {
	ns := namespace(t)
	group := ns + ".example.com"
	gadgets := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "gadgets"}
	crd, err := dyn.Resource(crds).Create(ctxFor(t), gadgetCRD(group), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dyn.Resource(crds).Delete(bgCtx(), crd.GetName(), metav1.DeleteOptions{}) })

	// A viewer of pods, configmaps and gadgets in ns, who may list namespaces.
	token := serviceAccountToken(t, ns, "viewer")
	viewer := serviceAccount(ns, "viewer")
	read := []string{"list", "watch"}
	if _, err := kube.RbacV1().Roles(ns).Create(bgCtx(), &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "viewer"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "configmaps"}, Verbs: read},
			{APIGroups: []string{group}, Resources: []string{"gadgets"}, Verbs: read},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind(t, ns, "viewer", viewer)
	clusterRole := "namespaces-" + ns
	if _, err := kube.RbacV1().ClusterRoles().Create(bgCtx(), &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: clusterRole},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: read}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(bgCtx(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: clusterRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{viewer},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(bgCtx(), clusterRole, metav1.DeleteOptions{})
		_ = kube.RbacV1().ClusterRoles().Delete(bgCtx(), clusterRole, metav1.DeleteOptions{})
	})

	// Objects: configmaps (one with 30 keys, for the diff), pods, gadgets.
	data := map[string]string{}
	for i := range 30 {
		data[fmt.Sprintf("k%02d", i)] = fmt.Sprintf("v%d", i)
	}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(bgCtx(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: data}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createConfigMap(t, ns, "other", nil, "v0")
	for _, name := range []string{"web-0", "web-1", "db-0"} {
		if _, err := kube.CoreV1().Pods(ns).Create(bgCtx(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}, {Name: "side", Image: "example.com/side:1"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// There is no kubelet: the status is written as one would.
	web0, err := kube.CoreV1().Pods(ns).Get(bgCtx(), "web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web0.Status.Phase = corev1.PodRunning
	web0.Status.ContainerStatuses = []corev1.ContainerStatus{
		{Name: "app", Ready: true, RestartCount: 2, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		{Name: "side", Ready: false, RestartCount: 1, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}},
	}
	if _, err := kube.CoreV1().Pods(ns).UpdateStatus(bgCtx(), web0, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the API server serves gadgets", func() bool {
		_, err := dyn.Resource(gadgets).Namespace(ns).List(bgCtx(), metav1.ListOptions{})
		return err == nil
	})
	for name, spec := range map[string]map[string]any{
		"small": {"color": "red", "size": int64(1), "shape": "round"},
		"large": {"color": "<b>blue</b>", "size": int64(9)},
	} {
		if _, err := dyn.Resource(gadgets).Namespace(ns).Create(bgCtx(), &unstructured.Unstructured{Object: obj(gadgets.GroupVersion().String(), "Gadget", ns, name, map[string]any{"spec": spec})}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	h := startAuthHub(t, server.Config{})
	ctx := browser(t)
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			screenshot(t, ctx, "console-sidebar-failed.png")
			t.Fatalf("%s: %v", what, err)
		}
	}
	var timings []string
	timing := func(what string, ms float64) {
		t.Helper()
		line := fmt.Sprintf("%s: %.0f ms", what, ms)
		t.Log(line)
		timings = append(timings, line)
	}
	t.Cleanup(func() {
		dir := filepath.Join("..", "..", ".cache", "test-artifacts", "browser")
		if err := os.MkdirAll(dir, 0o755); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "timings.txt"), []byte(strings.Join(timings, "\n")+"\n"), 0o644)
		}
	})
	entry := func(resource string) string {
		return fmt.Sprintf(`document.querySelector('#sidebar li[data-resource=%q]')`, resource)
	}
	count := func(resource string) string { return entry(resource) + `?.dataset.count` }

	// First paint: before anyone signs in.
	var firstPaint float64
	run("open the page",
		chromedp.Navigate("http://"+h.addr+"/"),
		waitJS(`performance.getEntriesByType("paint").some((e) => e.name === "first-contentful-paint")`),
		chromedp.Evaluate(`performance.getEntriesByType("paint").find((e) => e.name === "first-contentful-paint").startTime`, &firstPaint),
	)
	timing("first contentful paint, from navigation", firstPaint)
	var signinShown, signoutShown bool
	run("signed out", chromedp.Evaluate(`!document.getElementById("signin-form").hidden`, &signinShown), chromedp.Evaluate(`!document.getElementById("signout-button").hidden`, &signoutShown))
	if !signinShown || signoutShown {
		t.Errorf("signed out: sign-in form shown %v, Sign out shown %v", signinShown, signoutShown)
	}

	// Sign in, pick the namespace: the sidebar lists what the token reads, counted.
	run("sign in",
		chromedp.SendKeys("#token-input", token),
		chromedp.Click("#signin-button"),
		waitJS(`document.getElementById("signin-form").hidden && !document.getElementById("signout-button").hidden`),
		waitJS(fmt.Sprintf(`[...document.querySelectorAll("#namespace-list option")].some((o) => o.value === %q)`, ns)),
		chromedp.SetValue("#namespace-input", ns),
		chromedp.Evaluate(`document.getElementById("namespace-input").dispatchEvent(new Event("change")); true`, nil),
		waitJS(entry("gadgets")+` !== null && `+entry("pods")+` !== null`),
	)
	var listed []string
	run("the sidebar's types", chromedp.Evaluate(`[...document.querySelectorAll("#sidebar li")].map((li) => li.dataset.resource).sort()`, &listed))
	if got := strings.Join(listed, ","); got != "configmaps,gadgets,pods" {
		t.Errorf("the sidebar lists %s, want the types the token may read in %s: configmaps, gadgets, pods", got, ns)
	}
	apiCount := func(gvr schema.GroupVersionResource) int {
		list, err := dyn.Resource(gvr).Namespace(ns).List(ctxFor(t), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	// In a namespace, ListResources says of no type that its informer runs:
	// the sidebar counts none by itself (a count would start an informer),
	// and counts each when asked.
	askCount := func(resource string) chromedp.Action {
		return chromedp.Evaluate(entry(resource)+`.querySelector('[data-testid="sidebar-count-button"]').click(); true`, nil)
	}
	var counted bool
	run("no count unasked", chromedp.Evaluate(`[...document.querySelectorAll("#sidebar li")].some((li) => li.dataset.count !== undefined)`, &counted))
	if counted {
		t.Errorf("the sidebar counted a type whose informer the hub does not run, unasked")
	}
	for _, gvr := range []schema.GroupVersionResource{{Version: "v1", Resource: "configmaps"}, {Version: "v1", Resource: "pods"}, gadgets} {
		want := strconv.Itoa(apiCount(gvr))
		run("the count of "+gvr.Resource, askCount(gvr.Resource), waitJS(fmt.Sprintf(`%s === %q`, count(gvr.Resource), want)))
	}

	// Pods: kubectl's columns. Start to first row, measured in the page.
	var startToRow float64
	run("watch pods",
		chromedp.Evaluate(`window.firstRowAt = 0;
new MutationObserver(() => {
  if (!window.firstRowAt && document.querySelector("#objects-body tr")) window.firstRowAt = performance.now();
}).observe(document.getElementById("objects-body"), {childList: true});
window.startedAt = performance.now();
`+entry("pods")+`.querySelector("button").click(); true`, nil),
		waitJS(`document.querySelectorAll("#objects-body tr").length === 3 && document.getElementById("status").dataset.state === "live"`),
		chromedp.Evaluate(`window.firstRowAt - window.startedAt`, &startToRow),
	)
	timing("Start (a click on Pods) to the first row", startToRow)
	checkTable(t, run, "pods", []string{"Name", "Ready", "Status", "Restarts", "Node", "Age"}, map[string][]string{
		"web-0": {"web-0", "1/2", "CrashLoopBackOff", "3", "node-1"},
		"web-1": {"web-1", "0/2", "Pending", "0", "node-1"},
	})
	screenshot(t, ctx, "console-pods.png")

	// Gadgets: the CRD's priority-0 columns; tenant text stays text.
	run("watch gadgets", chromedp.Evaluate(entry("gadgets")+`.querySelector("button").click(); true`, nil),
		waitJS(`document.querySelectorAll("#objects-body tr").length === 2 && document.getElementById("status").dataset.state === "live"`))
	checkTable(t, run, "gadgets", []string{"Name", "Color", "Size", "Age"}, map[string][]string{
		"small": {"small", "red", "1"},
		"large": {"large", "<b>blue</b>", "9"},
	})
	var injected int
	run("no markup from the cluster", chromedp.Evaluate(`document.querySelectorAll("#objects-body b").length`, &injected))
	if injected != 0 {
		t.Errorf("a CRD's value became markup: %d <b> elements", injected)
	}
	screenshot(t, ctx, "console-crd.png")

	// ConfigMaps: YAML without managedFields, and with them on request.
	key := ns + "/settings"
	row := fmt.Sprintf(`document.querySelector('#objects-body tr[data-key=%q]')`, key)
	var yamlText string
	run("watch configmaps and select one",
		chromedp.Evaluate(entry("configmaps")+`.querySelector("button").click(); true`, nil),
		waitJS(row+` !== null && document.getElementById("status").dataset.state === "live"`),
		chromedp.Evaluate(row+`.click(); true`, nil),
		waitJS(`!document.getElementById("detail").hidden`),
		chromedp.Evaluate(`document.getElementById("detail-yaml").textContent`, &yamlText),
	)
	if !strings.Contains(yamlText, "\ndata:\n  k00: v0\n") || strings.Contains(yamlText, "managedFields") || !strings.Contains(yamlText, "name: settings") {
		t.Errorf("the YAML view, without managedFields:\n%s", yamlText)
	}
	run("show managedFields",
		chromedp.Click("#show-managed-fields"),
		chromedp.Evaluate(`document.getElementById("detail-yaml").textContent`, &yamlText),
	)
	if !strings.Contains(yamlText, "\n  managedFields:\n  - manager: ") {
		t.Errorf("the YAML view with managedFields shows none:\n%s", yamlText)
	}
	run("hide managedFields", chromedp.Click("#show-managed-fields"))
	screenshot(t, ctx, "console-yaml.png")

	// A one-line data change: the row changes (timed in the page), and the
	// diff shows that line, in view, the bookkeeping folded.
	var rv string
	run("the row's version", chromedp.Evaluate(row+`.dataset.resourceVersion`, &rv))
	run("observe the row",
		chromedp.Evaluate(fmt.Sprintf(`window.changedAt = 0;
new MutationObserver(() => {
  if (!window.changedAt && %s.dataset.resourceVersion !== %q) window.changedAt = Date.now();
}).observe(%s, {attributes: true, attributeFilter: ["data-resource-version"]}); true`, row, rv, row), nil))
	sent := time.Now()
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctxFor(t), "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["k20"] = "changed"
	if _, err := kube.CoreV1().ConfigMaps(ns).Update(ctxFor(t), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	returned := time.Now()
	var changedAt float64
	run("the row changes", waitJS(`window.changedAt > 0`), chromedp.Evaluate(`window.changedAt`, &changedAt))
	timing("live update: Update returned to the row's resourceVersion changing", changedAt-float64(returned.UnixMilli()))
	timing("live update: Get+Update sent to the row's resourceVersion changing", changedAt-float64(sent.UnixMilli()))

	var diff, folded string
	var inView bool
	run("the diff",
		waitJS(`document.querySelector("#detail-diff .diff-add") !== null`),
		chromedp.Evaluate(`document.getElementById("detail-diff").textContent`, &diff),
		chromedp.Evaluate(`document.getElementById("detail-folded").textContent`, &folded),
		chromedp.Evaluate(`(() => {
  const r = document.querySelector("#detail-diff .diff-add").getBoundingClientRect();
  const box = document.getElementById("detail-diff").getBoundingClientRect();
  return r.top >= 0 && r.bottom <= window.innerHeight && r.top >= box.top && r.bottom <= box.bottom;
})()`, &inView),
	)
	var changed []string
	for _, l := range strings.Split(diff, "\n") {
		if strings.HasPrefix(l, "+") || strings.HasPrefix(l, "-") {
			changed = append(changed, l)
		}
	}
	if got, want := strings.Join(changed, "\n"), "-   k20: v20\n+   k20: changed"; got != want {
		t.Errorf("the diff's changed lines:\n%s\nwant:\n%s\nwhole diff:\n%s", got, want, diff)
	}
	if !strings.Contains(folded, "lines of metadata folded") {
		t.Errorf("the folded note: %q", folded)
	}
	if !inView {
		t.Error("the changed line is not in view without scrolling")
	}
	screenshot(t, ctx, "console-diff.png")

	// Several types at once: one WatchMany, with a Kind column.
	run("watch pods and gadgets together",
		chromedp.Evaluate(entry("pods")+`.querySelector("input").click(); `+entry("gadgets")+`.querySelector("input").click(); true`, nil),
		chromedp.Click("#start-button"),
		waitJS(`document.querySelectorAll("#objects-body tr").length === 5 && document.getElementById("status").dataset.state === "live"`),
	)
	var kinds []string
	run("the kinds", chromedp.Evaluate(`[...document.querySelectorAll("#objects-body tr")].map((r) => r.dataset.kind + " " + r.dataset.name)`, &kinds))
	if got, want := strings.Join(kinds, ","), "Pod db-0,Pod web-0,Pod web-1,Gadget large,Gadget small"; got != want {
		t.Errorf("the rows of the two types: %s, want %s", got, want)
	}
	if _, err := dyn.Resource(gadgets).Namespace(ns).Create(bgCtx(), &unstructured.Unstructured{Object: obj(gadgets.GroupVersion().String(), "Gadget", ns, "new", map[string]any{"spec": map[string]any{"color": "green"}})}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	run("a gadget added while both are watched", waitJS(`document.querySelector('#objects-body tr[data-name="new"][data-kind="Gadget"].row-added') !== null`))
	// Pods, the first type watched, are counted live; gadgets once, and again when asked.
	run("its count", askCount("gadgets"), waitJS(fmt.Sprintf(`%s === %q`, count("gadgets"), strconv.Itoa(apiCount(gadgets)))))
	screenshot(t, ctx, "console-many.png")
}

// checkTable checks the table's header, and the cells of some rows (by
// name) up to Age, whose value moves on.
func checkTable(t *testing.T, run func(string, ...chromedp.Action), what string, header []string, cells map[string][]string) {
	t.Helper()
	var head []string
	var rowsByName map[string][]string
	run(what+"' table",
		chromedp.Evaluate(`[...document.querySelectorAll("#objects-head th")].map((th) => th.textContent)`, &head),
		chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll("#objects-body tr")].map((r) => [r.dataset.name, [...r.cells].map((c) => c.textContent)]))`, &rowsByName),
	)
	if got, want := strings.Join(head, "|"), strings.Join(header, "|"); got != want {
		t.Errorf("%s: header %s, want %s", what, got, want)
	}
	for name, want := range cells {
		got := rowsByName[name]
		if len(got) < len(want) || strings.Join(got[:len(want)], "|") != strings.Join(want, "|") {
			t.Errorf("%s: row %s is %q, want %q first", what, name, got, want)
		}
	}
}
