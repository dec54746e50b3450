package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/informerhub/informerhub/server"
)

// browser starts a headless Chromium (Debian's chromium: make
// browser-deps) for the test, and returns its tab's context.
func browser(t *testing.T) context.Context {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: run make browser-deps")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.WindowSize(1400, 1000))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to sandbox as root
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctxFor(t), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancel)
	return ctx
}

// screenshot keeps a screenshot of the page with the test's output, in
// .cache/test-artifacts/browser (git-ignored), and logs where.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var png []byte
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "..", ".cache", "test-artifacts", "browser")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(path)
	t.Logf("screenshot: %s", abs)
}

// waitJS waits until a JavaScript expression of the page is true.
func waitJS(expr string) chromedp.Action {
	var ok bool
	return chromedp.Poll(expr, &ok, chromedp.WithPollingTimeout(time.Minute), chromedp.WithPollingInterval(50*time.Millisecond))
}

// recordHighlights records, in window.seen, each highlight a row of the
// table gets ("namespace/name row-added"): the highlights last seconds,
// which a test must not race against.
const recordHighlights = `window.seen = [];
new MutationObserver((mutations) => {
  const record = (el) => {
    if (!el.dataset || !el.dataset.key) return;
    for (const c of ["row-added", "row-modified", "row-deleted"]) {
      if (el.classList.contains(c)) window.seen.push(el.dataset.key + " " + c);
    }
  };
  for (const m of mutations) {
    record(m.target);
    m.addedNodes.forEach(record);
  }
}).observe(document.getElementById("objects-body"), {subtree: true, childList: true, attributes: true, attributeFilter: ["class"]});
true`

func seen(key, highlight string) chromedp.Action {
	return waitJS(fmt.Sprintf(`window.seen.includes(%q)`, key+" "+highlight))
}

func rows(key string) string {
	return fmt.Sprintf(`document.querySelectorAll('#objects-body tr[data-key=%q]').length`, key)
}

// TestConsoleInABrowser drives the console in headless Chromium against a
// hub that authenticates and authorizes as --auth=kubernetes does: it signs
// in, shows the initial objects, a created, a modified and a deleted one,
// objects entering and leaving a filter, resumes after the hub restarts
// without repeating a row, and shows PERMISSION_DENIED for a namespace the
// token may not read.
func TestConsoleInABrowser(t *testing.T) {
	ns := namespace(t)
	createConfigMap(t, ns, "a", nil, "v0")
	token := serviceAccountToken(t, ns, "viewer")
	grant(t, ns, serviceAccount(ns, "viewer"), "configmaps")
	h := startAuthHub(t, server.Config{})
	ctx := browser(t)
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			screenshot(t, ctx, "failed.png")
			t.Fatalf("%s: %v", what, err)
		}
	}
	key := func(name string) string { return ns + "/" + name }

	run("sign in and start",
		chromedp.Navigate("http://"+h.addr+"/"),
		chromedp.SendKeys("#token-input", token),
		chromedp.Click("#signin-button"),
		chromedp.SetValue("#namespace-input", ns),
		chromedp.Click("#refresh-resources-button"),
		waitJS(`!document.getElementById("start-button").disabled`),
		chromedp.Evaluate(recordHighlights, nil),
		chromedp.Click("#start-button"),
		waitJS(rows(key("a"))+` === 1 && document.getElementById("status").dataset.state === "live"`),
	)
	var token1 string
	run("read the token", chromedp.Text("#resume-token", &token1))
	if token1 == "" {
		t.Error("no resume token shown")
	}

	createConfigMap(t, ns, "b", nil, "v0")
	run("a created object", seen(key("b"), "row-added"))
	updateConfigMap(t, ns, "a", nil, "v1")
	run("a modified object", seen(key("a"), "row-modified"))
	var diff string
	run("its diff", chromedp.Click(fmt.Sprintf(`#objects-body tr[data-key=%q]`, key("a"))), chromedp.Text("#detail-diff", &diff))
	if !strings.Contains(diff, "v0") || !strings.Contains(diff, "v1") {
		t.Errorf("the diff of a's change does not show v0 and v1:\n%s", diff)
	}
	deleteConfigMap(t, ns, "b")
	run("a deleted object", seen(key("b"), "row-deleted"), waitJS(rows(key("b"))+` === 0`))
	screenshot(t, ctx, "console.png")

	// The hub restarts at the same address: the page resumes by itself.
	addr := h.addr
	h.stop()
	run("the page notices", waitJS(`document.getElementById("status").dataset.state !== "live"`))
	startAuthHub(t, server.Config{}, withAddr(addr))
	createConfigMap(t, ns, "c", nil, "v0")
	run("resumed", seen(key("c"), "row-added"), waitJS(`document.getElementById("status").dataset.state === "live"`))
	run("no row repeated", waitJS(rows(key("a"))+` === 1 && `+rows(key("c"))+` === 1 && document.getElementById("object-count").textContent.trim() === "2"`))

	// A CEL filter: objects enter and leave it.
	run("filter",
		chromedp.Click("#stop-button"),
		chromedp.SetValue("#filter-input", `object.data.v == "blue"`),
		chromedp.Evaluate(`window.seen = []; true`, nil),
		chromedp.Click("#start-button"),
		waitJS(`document.getElementById("status").dataset.state === "live" && document.querySelectorAll("#objects-body tr").length === 0`),
	)
	updateConfigMap(t, ns, "c", nil, "blue")
	run("entering the filter", seen(key("c"), "row-added"))
	updateConfigMap(t, ns, "c", nil, "red")
	run("leaving the filter", seen(key("c"), "row-deleted"))

	// A namespace the token may not read.
	var reason, hint string
	run("forbidden",
		chromedp.Click("#stop-button"),
		chromedp.Evaluate(`document.getElementById("filter-input").value = ""; true`, nil),
		chromedp.SetValue("#namespace-input", "kube-system"),
		chromedp.Click("#start-button"),
		waitJS(`document.getElementById("error").dataset.reason === "FORBIDDEN"`),
		chromedp.Text("#error-code", &reason),
		chromedp.Text("#error-hint", &hint),
	)
	if !strings.Contains(reason, "PERMISSION_DENIED") || !strings.Contains(hint, "RoleBinding") {
		t.Errorf("the error shows %q with hint %q, want PERMISSION_DENIED and the proto's hint", reason, hint)
	}
	screenshot(t, ctx, "console-forbidden.png")
}

// webClientPage serves a page that loads clients/web's browser bundle,
// from an origin of its own.
func webClientPage(t *testing.T) *httptest.Server {
	t.Helper()
	bundle, err := os.ReadFile(filepath.Join("..", "..", "clients", "web", "dist", "informerhub-web.js"))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<!doctype html><title>a portal</title><script src="/informerhub-web.js"></script>`)
	})
	mux.HandleFunc("/informerhub-web.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		w.Write(bundle)
	})
	page := httptest.NewServer(mux)
	t.Cleanup(page.Close)
	return page
}

// TestWebClientFromAnotherOrigin: a page of an origin that
// --cors-allowed-origins allows watches through clients/web, in Chromium;
// one of another origin is refused by the browser.
func TestWebClientFromAnotherOrigin(t *testing.T) {
	ns := namespace(t)
	createConfigMap(t, ns, "a", nil, "v0")
	token := serviceAccountToken(t, ns, "portal")
	grant(t, ns, serviceAccount(ns, "portal"), "configmaps")
	allowed, refused := webClientPage(t), webClientPage(t)
	h := startAuthHub(t, server.Config{CORSAllowedOrigins: []string{allowed.URL}})
	ctx := browser(t)
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			screenshot(t, ctx, "failed-cors.png")
			t.Fatalf("%s: %v", what, err)
		}
	}
	// The page watches in the background, recording what it receives in
	// window.got, and window.listed once the initial events have ended.
	watchJS := fmt.Sprintf(`window.got = [];
(async () => {
  const hub = window.informerhubWeb;
  const transport = hub.createTransport({baseUrl: %q, token: %q});
  for await (const e of hub.watch(transport, {version: "v1", resource: "configmaps", namespace: %q}, {sendInitialEvents: true})) {
    if (e.initialEventsEnd) { window.got.push("END"); window.listed = true; continue; }
    if (e.type === "BOOKMARK") continue;
    window.got.push(e.type + " " + e.object.metadata.name);
  }
})();
true`, "http://"+h.addr, token, ns)
	run("watch from an allowed origin", chromedp.Navigate(allowed.URL), chromedp.Evaluate(watchJS, nil), waitJS(`window.listed === true`))
	createConfigMap(t, ns, "b", nil, "v0")
	var got string
	run("the change", waitJS(`window.got.includes("ADDED b")`), chromedp.Evaluate(`window.got.join(",")`, &got))
	if got != "ADDED a,END,ADDED b" {
		t.Errorf("the page received %s, want ADDED a,END,ADDED b", got)
	}

	// The browser refuses the response to another origin: the call fails
	// as a network error, before the page sees anything of it.
	callJS := fmt.Sprintf(`(async () => {
  const hub = window.informerhubWeb;
  try {
    await hub.listResources(hub.createTransport({baseUrl: %q, token: %q}), %q);
    window.outcome = "allowed";
  } catch (err) {
    window.outcome = "refused: " + String(err);
  }
})();
true`, "http://"+h.addr, token, ns)
	var outcome string
	run("a call from another origin", chromedp.Navigate(refused.URL), chromedp.Evaluate(callJS, nil),
		waitJS(`window.outcome !== undefined`), chromedp.Evaluate(`window.outcome`, &outcome))
	if !strings.HasPrefix(outcome, "refused") {
		t.Errorf("a call from an origin not allowed: %s", outcome)
	}
}

// TestWebClientDigestMatchesTheHubs: in Chromium, whose WebCrypto hashes,
// clients/web's Digest of a snapshot matches the hub's Digest at the
// snapshot's token; kept up with the watch from there through a change, a
// deletion (whose event carries another resourceVersion than the state
// held) and a creation, it matches the hub's at the last event's token.
func TestWebClientDigestMatchesTheHubs(t *testing.T) {
	ns := namespace(t)
	createConfigMap(t, ns, "a", nil, "v0")
	createConfigMap(t, ns, "b", nil, "v0")
	token := serviceAccountToken(t, ns, "portal")
	grant(t, ns, serviceAccount(ns, "portal"), "configmaps")
	page := webClientPage(t)
	h := startAuthHub(t, server.Config{CORSAllowedOrigins: []string{page.URL}})
	ctx := browser(t)
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			screenshot(t, ctx, "failed-digest.png")
			t.Fatalf("%s: %v", what, err)
		}
	}
	// window.checks records each comparison with the hub's digest as
	// "<count held> <matches> <moved>"; window.failure what went wrong.
	digestJS := fmt.Sprintf(`window.checks = [];
(async () => {
  const hub = window.informerhubWeb;
  const transport = hub.createTransport({baseUrl: %q, token: %q});
  const sel = {version: "v1", resource: "configmaps", namespace: %q};
  const snap = await hub.snapshot(transport, sel);
  const mine = await hub.Digest.of(snap.objects);
  const check = async (resumeToken) => {
    const answer = await hub.digest(transport, sel, {resumeToken});
    window.checks.push(mine.count + " " + mine.matches(answer) + " " + answer.moved);
  };
  await check(snap.resumeToken);
  const held = new Map(snap.objects.map((o) => [o.metadata.name, o]));
  for await (const e of hub.watch(transport, sel, {resumeToken: snap.resumeToken})) {
    if (e.type === "BOOKMARK") continue;
    const name = e.object.metadata.name;
    await mine.apply(e, held.get(name));
    if (e.type === "DELETED") held.delete(name);
    else held.set(name, e.object);
    if (name === "c") {
      await check(e.resumeToken);
      break;
    }
  }
})().catch((err) => { window.failure = String(err); });
true`, "http://"+h.addr, token, ns)
	run("the digest of a snapshot", chromedp.Navigate(page.URL), chromedp.Evaluate(digestJS, nil),
		waitJS(`window.checks.length === 1 || window.failure !== undefined`))
	updateConfigMap(t, ns, "a", nil, "v1")
	deleteConfigMap(t, ns, "b")
	createConfigMap(t, ns, "c", nil, "v0")
	var checks []string
	var failure string
	run("the digest after the changes", waitJS(`window.checks.length === 2 || window.failure !== undefined`),
		chromedp.Evaluate(`window.checks`, &checks), chromedp.Evaluate(`window.failure ?? ""`, &failure))
	if want := []string{"2 true false", "2 true false"}; failure != "" || strings.Join(checks, ",") != strings.Join(want, ",") {
		t.Errorf("the page's digests against the hub's: %q (failure %q), want %q", checks, failure, want)
	}
}
