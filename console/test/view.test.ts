import assert from "node:assert/strict";
import { test } from "node:test";
import { Code, ConnectError } from "@informerhub/web";
import { lineDiff, pretty } from "../src/diff.js";
import { errorSummary, errorView } from "../src/errors.js";
import { ageOf, formatAge, parseFields, resourceLabel } from "../src/format.js";
import { ErrorInfoSchema } from "../../clients/web/src/gen/google/rpc/error_details_pb.js";

const show = (before: string, after: string) => lineDiff(before, after).map((l) => `${l.op}${l.text}`);

test("lineDiff aligns the lines two texts share and marks the rest", () => {
  assert.deepEqual(show("a\nb\nc", "a\nb\nc"), [" a", " b", " c"]);
  assert.deepEqual(show("a\nb\nc", "a\nx\nc"), [" a", "-b", "+x", " c"]);
  assert.deepEqual(show("a\nc", "a\nb\nc"), [" a", "+b", " c"]);
  assert.deepEqual(show("x\na\ny\nb", "a\nz\nb"), ["-x", " a", "-y", "+z", " b"]);
  assert.deepEqual(show("", "a"), ["+a"]);
  assert.deepEqual(show("a", ""), ["-a"]);
});

test("lineDiff of two objects' JSON shows the changed field", () => {
  const before = pretty({ metadata: { name: "a", resourceVersion: "1" }, data: { mode: "off", size: "1" } });
  const after = pretty({ metadata: { name: "a", resourceVersion: "2" }, data: { mode: "on", size: "1" } });
  const changed = lineDiff(before, after).filter((l) => l.op !== " ").map((l) => `${l.op}${l.text.trim()}`);
  assert.deepEqual(changed, ['-"resourceVersion": "1"', '+"resourceVersion": "2"', '-"mode": "off",', '+"mode": "on",']);
});

test("lineDiff of very long texts still returns every line", () => {
  const a = Array.from({ length: 3000 }, (_, i) => `a${i}`).join("\n");
  const b = Array.from({ length: 3000 }, (_, i) => `b${i}`).join("\n");
  const d = lineDiff(a, b);
  assert.equal(d.filter((l) => l.op === "-").length, 3000);
  assert.equal(d.filter((l) => l.op === "+").length, 3000);
});

test("formatAge and ageOf read like kubectl's ages", () => {
  assert.equal(formatAge(5_400), "5s");
  assert.equal(formatAge(119_000), "119s");
  assert.equal(formatAge(600_000), "10m");
  assert.equal(formatAge(3 * 3600_000), "3h");
  assert.equal(formatAge(3 * 86400_000), "3d");
  assert.equal(ageOf("2026-11-26T10:00:00Z", Date.parse("2026-11-26T10:01:00Z")), "60s");
  assert.equal(ageOf(undefined, 0), "");
  assert.equal(ageOf("not a time", 0), "");
});

test("parseFields splits on commas and new lines, but not inside brackets", () => {
  assert.deepEqual(parseFields(""), []);
  assert.deepEqual(parseFields(" data , metadata.labels\nstatus.phase,"), ["data", "metadata.labels", "status.phase"]);
  assert.deepEqual(parseFields('metadata.labels["a,b"], data'), ['metadata.labels["a,b"]', "data"]);
});

test("resourceLabel names a resource as resource.version.group", () => {
  assert.equal(resourceLabel({ group: "", version: "v1", resource: "configmaps", kind: "ConfigMap" }), "configmaps.v1 (ConfigMap)");
  assert.equal(resourceLabel({ group: "apps", version: "v1", resource: "deployments", kind: "Deployment" }), "deployments.v1.apps (Deployment)");
});

test("errorView shows the code, reason, metadata and the proto's hint for the reason", () => {
  const err = new ConnectError("user may not list secrets", Code.PermissionDenied, undefined, [
    { desc: ErrorInfoSchema, value: { reason: "FORBIDDEN", domain: "informerhub.io", metadata: { namespace: "demo", verb: "list", resume_token: "x" } } },
  ]);
  const v = errorView(err);
  assert.equal(v.code, "PERMISSION_DENIED");
  assert.equal(v.reason, "FORBIDDEN");
  assert.equal(v.message, "user may not list secrets");
  assert.deepEqual(v.metadata, ["namespace=demo", "verb=list"]);
  assert.match(v.hint, /^the caller's Kubernetes RBAC does not allow list and watch/);
  assert.equal(errorSummary(err), "PERMISSION_DENIED · FORBIDDEN");
  assert.equal(errorSummary(new ConnectError("x", Code.Unavailable)), "UNAVAILABLE");
});
