import assert from "node:assert/strict";
import { test } from "node:test";
import type { EventTypeName, KubeObject, WatchEvent } from "@informerhub/web";
import { ObjectTable } from "../src/table.js";

const options = { highlightMs: 3000, deletedMs: 5000 };

function cm(name: string, rv: string, data: Record<string, string> = {}, namespace = "demo"): KubeObject {
  return { apiVersion: "v1", kind: "ConfigMap", metadata: { name, namespace, resourceVersion: rv, uid: `${name}-uid` }, data };
}

function ev(type: EventTypeName, object: KubeObject | null, extra: Partial<WatchEvent> = {}): WatchEvent {
  return {
    type,
    object,
    previousObject: null,
    resourceVersion: (object?.metadata?.resourceVersion as string | undefined) ?? "",
    resumeToken: "t",
    initialEventsEnd: false,
    fromRelist: false,
    filterError: "",
    resync: false,
    resyncReplaces: false,
    ...extra,
  };
}

const end = ev("BOOKMARK", null, { initialEventsEnd: true });

/** The rows as "namespace/name rv highlight". */
function rows(t: ObjectTable): string[] {
  return t.ordered().map((r) => `${r.namespace}/${r.name} ${r.resourceVersion} ${r.highlight ?? "-"}`);
}

test("initial objects are not highlighted; later changes are, until they expire", () => {
  const t = new ObjectTable(options);
  t.apply(ev("ADDED", cm("web-1", "2")), 0);
  t.apply(ev("ADDED", cm("db-0", "1")), 0);
  t.apply(end, 0);
  assert.deepEqual(rows(t), ["demo/db-0 1 -", "demo/web-1 2 -"]);
  assert.equal(t.isLive, true);

  assert.deepEqual(t.apply(ev("ADDED", cm("web-0", "3")), 1000), ["demo\u0000web-0"]);
  t.apply(ev("MODIFIED", cm("db-0", "4", { v: "2" })), 1000);
  assert.deepEqual(rows(t), ["demo/db-0 4 modified", "demo/web-0 3 added", "demo/web-1 2 -"]);
  assert.equal(t.count, 3);

  assert.deepEqual(t.expire(3999), []);
  assert.deepEqual(t.expire(4000).sort(), ["demo\u0000db-0", "demo\u0000web-0"]);
  assert.deepEqual(rows(t), ["demo/db-0 4 -", "demo/web-0 3 -", "demo/web-1 2 -"]);
});

test("a deleted row stays, struck through, for deletedMs, and is not counted", () => {
  const t = new ObjectTable(options);
  t.apply(ev("ADDED", cm("a", "1", { v: "1" })), 0);
  t.apply(end, 0);
  t.apply(ev("DELETED", cm("a", "2", { v: "last" })), 100);
  assert.deepEqual(rows(t), ["demo/a 2 deleted"]);
  assert.equal(t.count, 0);
  assert.deepEqual(t.get("demo\u0000a")?.object["data"], { v: "last" });
  t.expire(5099);
  assert.equal(t.ordered().length, 1);
  assert.deepEqual(t.expire(5100), ["demo\u0000a"]);
  assert.deepEqual(rows(t), []);
});

test("an object that comes back while its deleted row is shown is a new object: added, without a previous state", () => {
  const t = new ObjectTable(options);
  t.apply(end, 0);
  t.apply(ev("ADDED", cm("a", "1")), 0);
  t.apply(ev("DELETED", cm("a", "2")), 0);
  t.apply(ev("ADDED", cm("a", "3")), 10);
  assert.deepEqual(rows(t), ["demo/a 3 added"]);
  assert.equal(t.get("demo\u0000a")?.previous, null);
  assert.equal(t.count, 1);
  t.expire(10_000);
  assert.deepEqual(rows(t), ["demo/a 3 -"]); // not removed: it is no longer deleted
});

test("a MODIFIED keeps the previous state: the hub's previous_object, else the state the table held", () => {
  const t = new ObjectTable(options);
  t.apply(ev("ADDED", cm("a", "1", { v: "1" })), 0);
  t.apply(end, 0);
  t.apply(ev("MODIFIED", cm("a", "2", { v: "2" })), 0);
  assert.deepEqual(t.get("demo\u0000a")?.previous?.["data"], { v: "1" });
  t.apply(ev("MODIFIED", cm("a", "3", { v: "3" }), { previousObject: cm("a", "2", { v: "from the hub" }) }), 0);
  assert.deepEqual(t.get("demo\u0000a")?.previous?.["data"], { v: "from the hub" });
});

test("rows are ordered by namespace then name, and the same object never twice", () => {
  const t = new ObjectTable(options);
  for (const [ns, name] of [["b", "x"], ["a", "y"], ["a", "x"], ["", "z"]] as const) t.apply(ev("ADDED", cm(name, "1", {}, ns)), 0);
  t.apply(ev("ADDED", cm("x", "2", {}, "a")), 0); // repeated: replaces
  assert.deepEqual(t.ordered().map((r) => `${r.namespace}/${r.name}`), ["/z", "a/x", "a/y", "b/x"]);
  assert.equal(t.count, 4);
  assert.equal(t.indexOf("a\u0000y"), 2);
});

test("a re-sync that replaces the table deletes the rows it did not list, at its bookmark", () => {
  const t = new ObjectTable(options);
  t.apply(ev("ADDED", cm("a", "1")), 0);
  t.apply(ev("ADDED", cm("b", "1")), 0);
  t.apply(end, 0);
  const resync = { resync: true, resyncReplaces: true };
  t.apply(ev("ADDED", cm("b", "5"), resync), 10);
  assert.deepEqual(t.apply(ev("BOOKMARK", null, resync), 10), ["demo\u0000a"]);
  assert.deepEqual(rows(t), ["demo/a 1 deleted", "demo/b 5 added"]);
  assert.equal(t.count, 1);
});

test("events without an object name, and deletions of unknown objects, change nothing", () => {
  const t = new ObjectTable(options);
  assert.deepEqual(t.apply(ev("ADDED", { kind: "ConfigMap" }), 0), []);
  assert.deepEqual(t.apply(ev("DELETED", cm("nope", "1")), 0), []);
  assert.equal(t.ordered().length, 0);
  t.clear();
  assert.equal(t.isLive, false);
});
