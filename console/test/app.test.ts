// The console end to end, in Node: main.ts on a minimal DOM (dom.ts),
// talking through the web client and fetch to an in-memory hub. Time is
// mocked: renders, highlights and reconnection delays advance only when the
// test says, so nothing waits on the clock.

import assert from "node:assert/strict";
import { after, before, mock, test } from "node:test";
import { Code } from "@informerhub/web";
import { FakeHub, hubStatus } from "../../clients/web/test/fakehub.js";
import html from "../src/index.html";
import { installDOM, type HTMLElement, type HTMLInputElement, type HTMLSelectElement, type HTMLTableSectionElement } from "./dom.js";

const hub = new FakeHub();
const { storage } = installDOM(html, "http://hub.test", hub.fetch());

function el<T extends HTMLElement = HTMLElement>(id: string): T {
  const e = document.getElementById(id) as unknown as T | null;
  assert.ok(e !== null, `#${id}`);
  return e;
}

const text = (id: string) => el(id).textContent;
const state = () => el("status").dataset["state"];
const body = () => el<HTMLTableSectionElement>("objects-body");
/** The rows as "name rv class…". */
const rows = () =>
  body().rows.map((r) => [r.dataset["name"], r.dataset["resourceVersion"], ...r.classList.value.split(" ").filter((c) => c.startsWith("row-"))].join(" "));

/** Lets the streams run, then advances the clock by one render's delay, until cond holds (at most 20 steps, 1 s). */
async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 20; i++) {
    for (let j = 0; j < 10; j++) await new Promise((r) => setImmediate(r));
    if (cond()) return;
    mock.timers.tick(50);
  }
  assert.fail(`never: ${what}; rows ${JSON.stringify(rows())}, status ${text("status")}`);
}

before(async () => {
  mock.timers.enable({ apis: ["setTimeout", "setInterval", "Date"], now: Date.parse("2026-11-26T12:00:00Z") });
  hub.apply("ADDED", "a", { v: "1" });
  hub.apply("ADDED", "b");
  hub.apply("ADDED", "c");
  await import("../src/main.js");
});
after(() => mock.timers.reset());

test("the console signs in, lists, watches live, resumes exactly, explains errors and signs out", async () => {
  assert.equal(state(), "signed-out");
  assert.equal(el("signin-form").hidden, false);
  assert.equal(el("signout-button").hidden, true);

  // Sign in: the token goes to sessionStorage, and resources are listed with it.
  el<HTMLInputElement>("token-input").value = " secret ";
  el("signin-form").dispatch("submit");
  assert.equal(storage.get("informerhub.token"), "secret");
  assert.equal(el<HTMLInputElement>("token-input").value, "");
  await until(() => !el("resource-select").disabled, "resources listed");
  assert.equal(el<HTMLSelectElement>("resource-select").selectedOptions[0]?.textContent, "configmaps.v1 (ConfigMap)");
  assert.equal(text("selectable-fields"), "fields: metadata.name, metadata.namespace");
  assert.deepEqual(hub.authorizations, ["Bearer secret"]);
  // Signed in: Sign out, and no sign-in form.
  assert.equal(el("signin-form").hidden, true);
  assert.equal(el("signout-button").hidden, false);

  // The sidebar lists the type in its section. The hub runs no informer
  // for it (informer_active): a count would start one, so it is counted
  // only when asked.
  const entry = () => el("sidebar").children[0]!.children[1]!.children[0]!;
  assert.equal(el("sidebar").children[0]!.dataset["section"], "Config");
  assert.equal(entry().dataset["resource"], "configmaps");
  await until(() => true, "a moment");
  assert.equal(hub.counts, 0);
  assert.equal(entry().dataset["count"], undefined);
  const countButton = entry().children[3]!;
  assert.equal(countButton.dataset["testid"], "sidebar-count-button");
  countButton.dispatch("click");
  await until(() => entry().dataset["count"] === "3", "the sidebar's count");
  assert.equal(hub.counts, 1);

  // Start: the initial objects, not highlighted, then live.
  el<HTMLInputElement>("namespace-input").value = "demo";
  el<HTMLInputElement>("fields-input").value = "data";
  el("query-form").dispatch("submit");
  await until(() => state() === "live" && rows().length === 3, "initial objects");
  assert.deepEqual(rows(), ["a 1", "b 2", "c 3"]);
  const request = hub.requests.at(-1)!;
  assert.deepEqual([request.selector?.namespace, request.sendInitialEvents, request.includePrevious, [...request.fields]], ["demo", true, true, ["data"]]);
  assert.equal(text("object-count"), "3");

  // Changes are highlighted; a deleted row stays, struck through, uncounted.
  hub.apply("MODIFIED", "a", { v: "2" });
  hub.apply("ADDED", "d");
  hub.apply("DELETED", "b");
  await until(() => rows().length === 4 && rows().includes("b 6 row-deleted"), "changes");
  assert.deepEqual(rows(), ["a 4 row-modified", "b 6 row-deleted", "c 3", "d 5 row-added"]);
  assert.equal(text("object-count"), "3");
  assert.equal(text("event-count"), "6");
  assert.equal(text("resume-token"), "t6");

  // The selected row shows its JSON and its change.
  body().rows[0]!.dispatch("click");
  assert.equal(el("detail").hidden, false);
  // Only the format shown is written out.
  assert.equal(text("detail-json"), "");
  assert.equal(el("detail-json").hidden, true);
  assert.equal(el("detail-yaml").hidden, false);
  assert.match(text("detail-yaml"), /^data:\n {2}v: "2"$/m);
  // The data change first; the resourceVersion's change folded away.
  assert.match(text("detail-diff"), /- {3}v: "1"\n\+ {3}v: "2"/);
  assert.doesNotMatch(text("detail-diff"), /resourceVersion/);
  assert.equal(el("detail-folded").dataset["folded"], "2");
  assert.equal(el("detail-folded").hidden, false);
  el("view-json-button").dispatch("click");
  assert.match(text("detail-json"), /"v": "2"/);
  assert.equal(el("detail-json").hidden, false);
  assert.equal(el("detail-yaml").hidden, true);
  assert.match(text("detail-diff"), /- {5}"v": "1"\n\+ {5}"v": "2"/);
  el("view-yaml-button").dispatch("click");
  // The watched type is counted live, once the watch is connected: the count follows the changes.
  await until(() => entry().dataset["count"] === "3" && hub.counts === 2, "the count after changes");

  // Highlights end, and the deleted row goes, a few seconds later.
  mock.timers.tick(5000);
  await until(() => rows().length === 3, "deleted row gone");
  assert.deepEqual(rows(), ["a 4", "c 3", "d 5"]);

  // The hub goes away; what changes meanwhile arrives once it is back, exactly once.
  hub.interrupt(hubStatus(Code.Unavailable, "SHUTTING_DOWN", { resume_token: "t5" }));
  await until(() => state() === "reconnecting", "reconnecting");
  assert.match(text("status"), /UNAVAILABLE · SHUTTING_DOWN/);
  hub.apply("MODIFIED", "c", { v: "2" });
  mock.timers.tick(200); // the backoff
  await until(() => rows().includes("c 7 row-modified") && state() === "live", "resumed");
  assert.equal(hub.requests.at(-1)!.resumeToken, "t6");
  assert.deepEqual(rows(), ["a 4", "c 7 row-modified", "d 5"]);
  assert.equal(text("event-count"), "7");

  // The token expires while the hub is away: the console re-syncs, and shows only what differs.
  mock.timers.tick(5000);
  await until(() => rows().join() === "a 4,c 7,d 5", "highlights over");
  hub.interrupt(hubStatus(Code.Unavailable, ""));
  await until(() => state() === "reconnecting", "reconnecting again");
  hub.apply("DELETED", "d");
  hub.apply("ADDED", "e");
  hub.expiredBefore = 9;
  mock.timers.tick(200);
  await until(() => !el("notice").hidden && state() === "live" && rows().length === 4, "re-synced");
  assert.deepEqual(hub.requests.slice(-2).map((r) => [r.resumeToken, r.sendInitialEvents]), [["t7", false], ["", true]]);
  // A deletion found by listing carries the listing's resourceVersion.
  assert.deepEqual(rows(), ["a 4", "c 7", "d 9 row-deleted", "e 9 row-added"]);
  assert.equal(text("object-count"), "3");
  assert.equal(text("resume-token"), "t9");

  // PERMISSION_DENIED: shown with its reason and the proto's hint; the watch stops.
  hub.faults.push({ kind: "refuse", error: hubStatus(Code.PermissionDenied, "FORBIDDEN", { namespace: "kube-system", verb: "list" }) });
  el<HTMLInputElement>("namespace-input").value = "kube-system";
  el("query-form").dispatch("submit");
  await until(() => !el("error").hidden, "error shown");
  assert.equal(state(), "error");
  assert.equal(text("error-code"), "PERMISSION_DENIED");
  assert.equal(text("error-reason"), "FORBIDDEN");
  assert.equal(el("error").dataset["reason"], "FORBIDDEN");
  assert.match(text("error-hint"), /Have the access granted \(a RoleBinding\)/);
  assert.equal(text("error-metadata"), "namespace=kube-system  verb=list");

  // Sign out: the token and the table are gone.
  el("signout-button").dispatch("click");
  assert.equal(storage.has("informerhub.token"), false);
  assert.equal(state(), "signed-out");
  assert.equal(el("signin-form").hidden, false);
  assert.equal(el("signout-button").hidden, true);
  assert.deepEqual(rows(), []);
  assert.equal(el("error").hidden, true);
  assert.equal(el("signin-form").hidden, false);
  assert.equal(el("signout-button").hidden, true);
  assert.equal(el("sidebar").children.length, 0);
});

test("counts: the watch first, then one live Count; others once, only where the informer runs; none while hidden or stopped; ticks capped", async () => {
  const configmaps = { version: "v1", resource: "configmaps", kind: "ConfigMap", namespaced: true, selectableFields: [], informerActive: true };
  const secrets = { version: "v1", resource: "secrets", kind: "Secret", namespaced: true, selectableFields: [] };
  const services = { version: "v1", resource: "services", kind: "Service", namespaced: true, selectableFields: [] };
  hub.resources = [configmaps, secrets, services];
  hub.maxWatchesPerStream = 2;
  // Signed out: no stream left open.
  await until(() => hub.openCounts === 0, "no count left open at sign-out");
  const counts = hub.counts;
  el<HTMLInputElement>("namespace-input").value = "";
  el<HTMLInputElement>("token-input").value = "secret";
  el("signin-form").dispatch("submit");
  await until(() => el("sidebar").children.length === 2, "the sidebar");
  const entries = () => el("sidebar").children.flatMap((d) => d.children[1]!.children);
  const entry = (resource: string) => entries().find((e) => e.dataset["resource"] === resource)!;
  // Only configmaps, whose informer runs, is counted by itself, once.
  await until(() => entry("configmaps").dataset["count"] === "3", "configmaps counted");
  await until(() => hub.openCounts === 0, "the one-shot count closed");
  assert.equal(hub.counts, counts + 1);
  assert.equal(entry("secrets").dataset["count"], undefined);

  // Three ticked: the third is refused, with a reason.
  const tick = (resource: string) => {
    const box = entry(resource).children[0] as HTMLInputElement;
    box.checked = true;
    box.dispatch("change");
    return box;
  };
  tick("configmaps");
  tick("secrets");
  assert.equal(tick("services").checked, false);
  assert.match(text("resources-note"), /at most 2 types/);

  // Start: the WatchMany first; then one live Count (configmaps), and secrets counted once.
  const many = hub.manyRequests.length;
  el("query-form").dispatch("submit");
  assert.equal(hub.openCounts, 0);
  await until(() => state() === "live" && entry("secrets").dataset["count"] === "3", "watching both");
  assert.equal(hub.manyRequests.length, many + 1);
  assert.equal(hub.manyRequests.at(-1)!.watches.length, 2);
  await until(() => hub.openCounts === 1, "one live count");

  // Hidden: the live count gives its connection back; shown, it counts again.
  const doc = document as unknown as { visibilityState: string; dispatch(type: string): void };
  doc.visibilityState = "hidden";
  doc.dispatch("visibilitychange");
  await until(() => hub.openCounts === 0, "no count while hidden");
  doc.visibilityState = "visible";
  doc.dispatch("visibilitychange");
  await until(() => hub.openCounts === 1, "the live count again");

  // Stop: no stream at all.
  el("stop-button").dispatch("click");
  await until(() => hub.openCounts === 0, "no count once stopped");
  el("signout-button").dispatch("click");
});
