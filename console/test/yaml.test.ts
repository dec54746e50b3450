// The YAML view and the change's diff with the bookkeeping folded away.

import assert from "node:assert/strict";
import { test } from "node:test";
import { changeOf, withoutManagedFields } from "../src/diff.js";
import { needsQuotes, toYAML } from "../src/yaml.js";

test("toYAML writes block YAML as kubectl does", () => {
  const o = {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: "a", labels: { "app.kubernetes.io/name": "web" }, annotations: {} },
    data: { "a.txt": "line 1\nline 2\n", n: "1", b: "true", e: "", s: "a: b", list: "- x" },
    spec: { ports: [{ port: 80, name: "http" }, { port: 443 }], empty: [], nested: [[1, 2], []], none: null, yes: true },
  };
  assert.equal(
    toYAML(o),
    `apiVersion: v1
kind: ConfigMap
metadata:
  name: a
  labels:
    app.kubernetes.io/name: web
  annotations: {}
data:
  a.txt: |
    line 1
    line 2
  "n": "1"
  b: "true"
  e: ""
  s: "a: b"
  list: "- x"
spec:
  ports:
  - port: 80
    name: http
  - port: 443
  empty: []
  nested:
  - - 1
    - 2
  - []
  none: null
  "yes": true
`,
  );
});

test("strings that would read back as something else are quoted", () => {
  for (const s of ["", "true", "False", "yes", "off", "null", "~", "1", "-1.5", "1e3", "0x1F", "0o17", ".inf", "2026-11-26", "12:30", "a: b", "a:", "x #y", " lead", "trail ", "- a", "*ref", "&anchor", "!tag", "%x", "@x", "`x", "{a}", "[a]", "#c", "'q'", '"q"', "|", ">", "tab\there", "bell\u0007"]) {
    assert.ok(needsQuotes(s), JSON.stringify(s));
    assert.equal(toYAML({ k: s }), `k: ${JSON.stringify(s)}\n`, JSON.stringify(s));
  }
  for (const s of ["web", "a-b", "a.b/c", "http://x/y", "a:b", "v1.37.1", "hello world"]) {
    assert.ok(!needsQuotes(s), s);
    assert.equal(toYAML({ k: s }), `k: ${s}\n`);
  }
  // Multi-line strings: block scalars with the right chomping.
  assert.equal(toYAML({ k: "a\nb" }), "k: |-\n  a\n  b\n");
  assert.equal(toYAML({ k: "a\nb\n\n" }), "k: |+\n  a\n  b\n\n");
  assert.equal(toYAML({ k: " a\nb" }), "k: |2-\n   a\n  b\n");
  // Unless they would not survive as one: quoted.
  assert.equal(toYAML({ k: "a \nb" }), 'k: "a \\nb"\n');
});

const before = {
  metadata: {
    name: "a",
    resourceVersion: "10",
    generation: 1,
    managedFields: [{ manager: "kubectl", time: "2026-11-26T11:00:00Z", fieldsV1: { "f:data": { "f:v": {} } } }],
  },
  data: Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`k${String(i).padStart(2, "0")}`, `v${i}`])),
};

test("a one-line data change is one line, the bookkeeping folded and counted", () => {
  const after = structuredClone(before);
  after.metadata.resourceVersion = "11";
  after.metadata.generation = 2;
  after.metadata.managedFields[0]!.time = "2026-11-26T12:00:00Z";
  after.data["k20"] = "changed";
  const change = changeOf(before, after, toYAML);
  const changed = change.lines.filter((l) => l.op === "+" || l.op === "-");
  assert.deepEqual(changed, [
    { op: "-", text: "  k20: v20" },
    { op: "+", text: "  k20: changed" },
  ]);
  assert.equal(change.folded, 6); // resourceVersion, generation, managedFields' time: - and +
  assert.equal(change.changed, true);
  // What changed comes early: the unchanged lines before it are summarized.
  assert.deepEqual(change.lines[0], { op: "…", text: "20 unchanged lines", skipped: 20 });
  assert.equal(change.lines.length, 1 + 3 + 2 + 3 + 1);
  // A change of bookkeeping alone shows no change.
  const touched = structuredClone(before);
  touched.metadata.resourceVersion = "12";
  assert.deepEqual(changeOf(before, touched, toYAML), { lines: [{ op: "…", text: "33 unchanged lines", skipped: 33 }], folded: 2, changed: false });
});

test("managedFields are hidden from the view, and only they", () => {
  const shown = withoutManagedFields(before) as typeof before;
  assert.equal("managedFields" in shown.metadata, false);
  assert.equal(shown.metadata.resourceVersion, "10");
  assert.ok("managedFields" in before.metadata, "the object itself is not modified");
  assert.doesNotMatch(toYAML(shown), /managedFields/);
});
