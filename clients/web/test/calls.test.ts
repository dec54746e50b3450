// The transport, listResources, snapshot and the error helpers.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Code, ConnectError, createRouterTransport } from "@connectrpc/connect";
import { InformerHubService } from "../src/gen/informerhub/v1/informerhub_pb.js";
import { codeName, createTransport, hintFor, hubError, listResources, snapshot, statusHints } from "../src/index.js";
import { hubStatus } from "./fakehub.js";

/** A fetch that records its requests and answers ListResources with one resource, in the Connect protocol's JSON. */
function recordingFetch(requests: Request[]): typeof fetch {
  return async (input, init) => {
    requests.push(new Request(input, init));
    const body = JSON.stringify({ resources: [{ version: "v1", resource: "configmaps", kind: "ConfigMap", namespaced: true }] });
    return new Response(body, { status: 200, headers: { "content-type": "application/json" } });
  };
}

test("createTransport sends the bearer token of getToken, read for every call, to the service's path", async () => {
  const requests: Request[] = [];
  let n = 0;
  const transport = createTransport({
    baseUrl: "https://hub.example.com",
    getToken: () => `token-${++n}`,
    binary: false,
    fetch: recordingFetch(requests),
  });
  const resources = await listResources(transport, "demo");
  await listResources(transport);
  assert.deepEqual(resources.map((r) => [r.resource, r.kind, r.namespaced]), [["configmaps", "ConfigMap", true]]);
  assert.equal(requests[0]!.url, "https://hub.example.com/informerhub.v1.InformerHubService/ListResources");
  assert.equal(requests[0]!.headers.get("content-type"), "application/json");
  assert.deepEqual(await requests[0]!.json(), { namespace: "demo" });
  assert.deepEqual(requests.map((r) => r.headers.get("authorization")), ["Bearer token-1", "Bearer token-2"]);
});

test("createTransport speaks gRPC-Web, binary by default, and refuses both token and getToken", async () => {
  const requests: Request[] = [];
  const transport = createTransport({ baseUrl: "http://127.0.0.1:8080", token: "t", protocol: "grpcweb", fetch: recordingFetch(requests) });
  await listResources(transport).catch(() => undefined); // the fake answers JSON, not gRPC-Web: only the request matters
  assert.equal(requests[0]!.headers.get("content-type"), "application/grpc-web+proto");
  assert.equal(requests[0]!.headers.get("authorization"), "Bearer t");
  assert.throws(() => createTransport({ baseUrl: "http://x", token: "a", getToken: () => "b" }), TypeError);
});

test("snapshot reads every page, keeping filterErrors parallel to objects", async () => {
  const cm = (name: string) => JSON.stringify({ metadata: { name, namespace: "demo" } });
  const transport = createRouterTransport(({ service }) => {
    service(InformerHubService, {
      async *snapshot(req) {
        assert.equal(req.selector?.filter, "has(object.data)");
        yield { objects: [cm("a"), cm("b")], resumeToken: "s", resourceVersion: "7" };
        yield { objects: [cm("c")], filterErrors: ["no such key: data"], resumeToken: "s", resourceVersion: "7" };
        yield { objects: [cm("d")], resumeToken: "s", resourceVersion: "7", last: true };
      },
      async *watch() {},
      listResources: () => ({}),
    });
  });
  const snap = await snapshot(transport, { version: "v1", resource: "configmaps", filter: "has(object.data)" });
  assert.deepEqual(snap.objects.map((o) => o.metadata?.name), ["a", "b", "c", "d"]);
  assert.deepEqual(snap.filterErrors, ["", "", "no such key: data", ""]);
  assert.equal(snap.resumeToken, "s");
  assert.equal(snap.resourceVersion, "7");
});

test("snapshot fails with UNAVAILABLE when the stream ends before its last page", async () => {
  const transport = createRouterTransport(({ service }) => {
    service(InformerHubService, {
      async *snapshot() {
        yield { objects: [], resumeToken: "s" };
      },
      async *watch() {},
      listResources: () => ({}),
    });
  });
  await assert.rejects(snapshot(transport, { version: "v1", resource: "configmaps" }), (err) => hubError(err).code === Code.Unavailable);
});

test("hubError describes any error; hintFor falls back to the code's entry without a reason", () => {
  const plain = hubError(new Error("boom"));
  assert.equal(plain.code, Code.Unknown);
  assert.equal(plain.reason, "");
  assert.deepEqual(plain.violations, []);

  const limited = hubError(new ConnectError("too many calls", Code.ResourceExhausted));
  assert.equal(limited.hint?.details, false);
  assert.match(limited.hint?.text ?? "", /back off and retry/);

  const expired = hubError(hubStatus(Code.OutOfRange, "RESUME_TOKEN_EXPIRED", { resource: "configmaps" }));
  assert.match(expired.hint?.text ?? "", /Call Snapshot, or Watch with send_initial_events, and reconcile with what you hold\./);
  assert.equal(hintFor(Code.Canceled, "")?.codes.join(), "CANCELED,DEADLINE_EXCEEDED");
  assert.equal(hintFor(Code.DataLoss, ""), undefined);
  assert.equal(codeName(Code.ResourceExhausted), "RESOURCE_EXHAUSTED");
});

test("the hints name only real codes, and every reason once", () => {
  const names = new Set(Object.values(Code).filter((v): v is Code => typeof v === "number").map(codeName));
  const reasons = statusHints.filter((h) => h.reason !== "").map((h) => `${h.codes.join()} ${h.reason}`);
  for (const h of statusHints) for (const c of h.codes) assert.ok(names.has(c), c);
  assert.equal(new Set(reasons).size, reasons.length);
  assert.ok(reasons.includes("PERMISSION_DENIED FORBIDDEN"));
  assert.ok(reasons.includes("UNAVAILABLE SHUTTING_DOWN"));
});
