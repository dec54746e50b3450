// The YAML view and the change's diff with the bookkeeping folded away.

import assert from "node:assert/strict";
import { test } from "node:test";
import { changeOf, pretty, withoutManagedFields } from "../src/diff.js";
import { needsQuotes, toYAML, tooBig } from "../src/yaml.js";

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

test("strings YAML 1.1 reads as booleans, numbers, merge keys or infinities are quoted, keys too", () => {
  const quoted = [
    "y", "Y", "n", "N", "yes", "YES", "yEs", "no", "nO", "on", "ON", "oN", "off", "OfF", "NuLL", "TrUe",
    "<<", "=", ".inf", "+.inf", "-.Inf", "+.INF", ".NaN", ".nan", ".NAN",
    "1e+21", "1e-7", "1E5", "0x1F", "0X1f", "-0x1F", "0o17", "017", "0b101", "1_000", "+1_000.5", "1:20", ".5", "1.",
  ];
  for (const s of quoted) {
    assert.ok(needsQuotes(s), s);
    assert.equal(toYAML({ [s]: s }), `${JSON.stringify(s)}: ${JSON.stringify(s)}\n`, s);
  }
  for (const s of ["yess", "o", "onion", "infinity", "0x", "1.2.3", "1e", "v1", "<", "=="]) assert.ok(!needsQuotes(s), s);
});

test("characters JSON leaves alone but YAML reads otherwise are escaped, and quoted", () => {
  const cases: [string, string][] = [
    ["a\u2028b", '"a\\u2028b"'],
    ["a\u2029b", '"a\\u2029b"'],
    ["a\u0085b", '"a\\u0085b"'],
    ["a\u007fb", '"a\\u007fb"'],
    ["a\u009fb", '"a\\u009fb"'],
    ["\ufeffa", '"\\ufeffa"'],
    // In a multi-line string too: not a block scalar.
    ["a\n\u2028", '"a\\n\\u2028"'],
  ];
  for (const [s, want] of cases) {
    assert.equal(toYAML({ k: s }), `k: ${want}\n`, JSON.stringify(s));
    // What was written reads back, as a JSON string, as the same string.
    assert.equal(JSON.parse(want), s);
    assert.doesNotMatch(toYAML({ k: s }), /[\u007f-\u009f\u2028\u2029\ufeff]/);
  }
  // As a key too.
  assert.equal(toYAML({ "\u2028": 1 }), '"\\u2028": 1\n');
});

test("objects too deep or too large are not written out, and nothing overflows the stack", () => {
  let deep: unknown = "leaf";
  for (let i = 0; i < 10_000; i++) deep = { a: deep };
  assert.match(toYAML(deep), /^# The object is too deep or too large to show as YAML \(nested more than 200 levels deep\); see the JSON view\.\n$/);
  assert.match(pretty(deep), /^\/\/ The object is too deep or too large to show \(nested more than 1000 levels deep\)\.$/);
  let arrays: unknown = [];
  for (let i = 0; i < 10_000; i++) arrays = [arrays];
  assert.match(toYAML(arrays), /too deep/);
  // 150 levels: still written, and as JSON too.
  let ok: unknown = 1;
  for (let i = 0; i < 150; i++) ok = { a: ok };
  assert.equal(toYAML(ok).split("\n").length, 151);
  assert.doesNotMatch(pretty(ok), /too deep/);
  // Wide: a list of 150000 items in a list item, whose lines were spread into another array.
  const wide = { items: [Array.from({ length: 150_000 }, (_, i) => i)] };
  const yaml = toYAML(wide);
  assert.equal(yaml.split("\n").length, 150_002);
  assert.match(yaml, /^items:\n- - 0\n {2}- 1\n/);
  // Too many values.
  assert.match(toYAML({ items: Array.from({ length: 300_000 }, () => ({ a: 1 })) }), /more than 200000 values/);
  assert.equal(tooBig({ a: [1, 2] }, 2, 4), "");
  assert.equal(tooBig({ a: [1, 2] }, 2, 3), "more than 3 values");
  assert.equal(tooBig({ a: [{}] }, 2), "nested more than 2 levels deep");
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
