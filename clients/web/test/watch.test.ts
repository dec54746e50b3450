// The resuming watch against an in-memory hub (connect-es's router
// transport): every drop, expiry and refusal the proto lists, checked by the
// exact requests the client makes and the exact events it yields.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Code } from "@connectrpc/connect";
import { bearerAuth, hubError, watch, type WatchEvent, type WatchOptions } from "../src/index.js";
import { FakeHub, hubStatus } from "./fakehub.js";

const configmaps = { version: "v1", resource: "configmaps", namespace: "demo" };
// No waiting between attempts: the tests are synchronised by the hub's
// faults and by the events themselves, never by time.
const noDelay: WatchOptions = { backoff: { initialMs: 0 } };

/** An event as "TYPE name rv", or "BOOKMARK" (+ " end" for initial_events_end); resync events marked. */
function show(e: WatchEvent): string {
  const mark = e.resync ? " (resync)" : "";
  if (e.type === "BOOKMARK") return `BOOKMARK${e.initialEventsEnd ? " end" : ""}${mark}`;
  return `${e.type} ${e.object?.metadata?.name} ${e.resourceVersion}${mark}`;
}

/** Iterates w, calling step with each event and the events so far, until step returns true. */
async function consume(
  w: AsyncIterable<WatchEvent>,
  step: (e: WatchEvent, seen: string[]) => boolean | void,
): Promise<string[]> {
  const seen: string[] = [];
  for await (const e of w) {
    seen.push(show(e));
    if (step(e, seen) === true) break;
  }
  return seen;
}

describe("watch", () => {
  test("resumes after a drop mid-stream from the last token it yielded, in and after the initial events", async () => {
    const hub = new FakeHub();
    hub.apply("ADDED", "a");
    hub.apply("ADDED", "b");
    hub.apply("ADDED", "c");
    hub.faults.push(
      // The hub shuts down after two initial objects; its ErrorInfo token may be older by one.
      { kind: "fail", after: 2, error: hubStatus(Code.Unavailable, "SHUTTING_DOWN", { resume_token: "i3.1" }) },
      // The second stream: the last initial object, the bookmark, one change; then the network breaks.
      { kind: "fail", after: 3, error: hubStatus(Code.Unavailable, "") },
    );
    const retries: string[] = [];
    const w = watch(hub.transport(), configmaps, {
      ...noDelay,
      sendInitialEvents: true,
      onRetry: (err, failures) => retries.push(`${Code[err.code]} ${failures}`),
    });
    const events = await consume(w, (e, seen) => {
      if (e.initialEventsEnd) hub.apply("MODIFIED", "a", { v: "2" });
      if (seen.length === 5) hub.apply("DELETED", "b"); // sent on the third stream
      return seen.length === 6;
    });
    assert.deepEqual(events, ["ADDED a 1", "ADDED b 2", "ADDED c 3", "BOOKMARK end", "MODIFIED a 4", "DELETED b 5"]);
    assert.deepEqual(
      hub.requests.map((r) => [r.resumeToken, r.sendInitialEvents]),
      [["", true], ["i3.2", false], ["t4", false]],
    );
    assert.deepEqual(retries, ["Unavailable 1", "Unavailable 1"]); // each reconnection followed an event: no growing backoff
    assert.equal(w.resumeToken, "t5");
  });

  test("resumes from the token of the stream's start (the resume-token header) when it drops before any event", async () => {
    const hub = new FakeHub();
    hub.apply("ADDED", "a");
    hub.faults.push({ kind: "fail", after: 0, error: hubStatus(Code.Unavailable, "UPSTREAM_UNAVAILABLE") });
    const w = watch(hub.transport(), configmaps, {
      ...noDelay,
      // A change while the watch is disconnected: a watch "from now" would lose it.
      onRetry: () => hub.apply("MODIFIED", "a", { v: "2" }),
    });
    assert.equal(w.resumeToken, "");
    const events = await consume(w, () => true);
    assert.deepEqual(events, ["MODIFIED a 2"]);
    assert.deepEqual(hub.requests.map((r) => r.resumeToken), ["", "t1"]);
  });

  test("keeps asking for initial events until the hub issued a token, and not after", async () => {
    const hub = new FakeHub();
    hub.apply("ADDED", "a");
    hub.faults.push(
      { kind: "refuse", error: hubStatus(Code.Unavailable, "SHUTTING_DOWN") }, // no headers, no token
      { kind: "end", after: 0 }, // headers (token i1.0), then a clean end
    );
    const events = await consume(watch(hub.transport(), configmaps, { ...noDelay, sendInitialEvents: true }), (e) => e.initialEventsEnd);
    assert.deepEqual(events, ["ADDED a 1", "BOOKMARK end"]);
    assert.deepEqual(
      hub.requests.map((r) => [r.resumeToken, r.sendInitialEvents]),
      [["", true], ["", true], ["i1.0", false]],
    );
  });

  test("resumes a stream that just ends, and backs off more after each attempt without an event", async () => {
    const hub = new FakeHub();
    hub.apply("ADDED", "a");
    hub.faults.push(
      { kind: "end", after: 0 },
      { kind: "fail", after: 0, error: hubStatus(Code.ResourceExhausted, "SUBSCRIBER_TOO_SLOW") },
      { kind: "refuse", error: hubStatus(Code.Unavailable, "RESUME_TOKEN_AHEAD") },
      { kind: "fail", after: 0, error: hubStatus(Code.Internal, "") },
    );
    const failures: number[] = [];
    const w = watch(hub.transport(), configmaps, {
      ...noDelay,
      onRetry: (_, n) => {
        failures.push(n);
        if (n === 4) hub.apply("MODIFIED", "a", { v: "3" }); // while disconnected
      },
    });
    hub.apply("MODIFIED", "a", { v: "2" }); // before the watch started: not part of it
    const events = await consume(w, () => true);
    assert.deepEqual(failures, [1, 2, 3, 4]);
    assert.deepEqual(hub.requests.map((r) => r.resumeToken), ["", "t2", "t2", "t2", "t2"]);
    assert.deepEqual(events, ["MODIFIED a 3"]);
  });

  test("re-syncs when the token expired (OUT_OF_RANGE), yielding only the differences, and goes on live", async () => {
    const hub = new FakeHub();
    hub.apply("ADDED", "a");
    hub.apply("ADDED", "b");
    hub.faults.push(
      { kind: "fail", after: 4, error: hubStatus(Code.Unavailable, "") },
      undefined, // serves normally: the token is expired by then
      { kind: "fail", after: 1, error: hubStatus(Code.Unavailable, "") }, // the re-sync's listing breaks once
    );
    const retries: string[] = [];
    const w = watch(hub.transport(), configmaps, {
      ...noDelay,
      sendInitialEvents: true,
      onRetry: (err, failures) => {
        retries.push(`${Code[err.code]} ${failures}`);
        if (retries.length > 1) return;
        // While the watch is away, b goes, c comes, a changes, and the
        // history moves past the watch's token.
        hub.apply("DELETED", "b");
        hub.apply("ADDED", "c");
        hub.apply("MODIFIED", "a", { v: "3" });
        hub.expiredBefore = 6;
      },
    });
    const events = await consume(w, (e, seen) => {
      if (e.initialEventsEnd) hub.apply("MODIFIED", "a", { v: "2" });
      if (e.resync && e.type === "BOOKMARK") {
        assert.equal(w.resumeToken, "t6");
        hub.apply("MODIFIED", "c", { v: "2" });
      }
      return seen.length === 9;
    });
    assert.deepEqual(events, [
      "ADDED a 1",
      "ADDED b 2",
      "BOOKMARK end",
      "MODIFIED a 3",
      "DELETED b 6 (resync)",
      "MODIFIED a 6 (resync)",
      "ADDED c 5 (resync)",
      "BOOKMARK (resync)",
      "MODIFIED c 7",
    ]);
    assert.deepEqual(retries, ["Unavailable 1", "OutOfRange 0", "Unavailable 1"]);
    assert.deepEqual(
      hub.requests.map((r) => [r.resumeToken, r.sendInitialEvents]),
      [["", true], ["t3", false], ["", true], ["i6.1", false]],
    );
    assert.equal(w.resumeToken, "t7");
  });

  test("a re-sync of a watch that started from a token replaces what the caller holds", async () => {
    const hub = new FakeHub();
    hub.apply("ADDED", "a");
    hub.apply("ADDED", "b");
    hub.apply("DELETED", "a");
    hub.expiredBefore = 3;
    const seen: WatchEvent[] = [];
    for await (const e of watch(hub.transport(), configmaps, { ...noDelay, resumeToken: "t1" })) {
      seen.push(e);
      if (e.type === "BOOKMARK") break;
    }
    assert.deepEqual(seen.map(show), ["ADDED b 2 (resync)", "BOOKMARK (resync)"]);
    assert.ok(seen.every((e) => e.resyncReplaces));
    assert.equal(seen[0]!.resumeToken, "t1"); // until the re-sync completes, a restart re-syncs again
    assert.equal(seen[1]!.resumeToken, "t3");
  });

  test("surfaces PERMISSION_DENIED · FORBIDDEN with its metadata and the proto's hint, without retrying", async () => {
    const hub = new FakeHub();
    hub.faults.push({
      kind: "refuse",
      error: hubStatus(Code.PermissionDenied, "FORBIDDEN", { user: "system:serviceaccount:demo:explorer", verb: "list", namespace: "kube-system" }),
    });
    await assert.rejects(consume(watch(hub.transport(), configmaps, noDelay), () => true), (err) => {
      const h = hubError(err);
      assert.equal(h.code, Code.PermissionDenied);
      assert.equal(h.codeName, "PERMISSION_DENIED");
      assert.equal(h.reason, "FORBIDDEN");
      assert.equal(h.domain, "informerhub.io");
      assert.equal(h.metadata["namespace"], "kube-system");
      assert.match(h.hint?.text ?? "", /Have the access granted \(a RoleBinding\), then resume from your last token/);
      return true;
    });
    assert.equal(hub.requests.length, 1);
  });

  test("ends a running watch whose access was revoked, keeping the token to resume from", async () => {
    const hub = new FakeHub();
    hub.apply("ADDED", "a");
    hub.apply("ADDED", "b");
    hub.faults.push({ kind: "fail", after: 2, error: hubStatus(Code.PermissionDenied, "FORBIDDEN", { resume_token: "i2.1" }) });
    const w = watch(hub.transport(), configmaps, { ...noDelay, sendInitialEvents: true });
    const events: string[] = [];
    await assert.rejects(
      consume(w, (e) => void events.push(show(e))),
      (err) => hubError(err).reason === "FORBIDDEN",
    );
    assert.deepEqual(events, ["ADDED a 1", "ADDED b 2"]);
    assert.equal(w.resumeToken, "i2.2");
    assert.equal(hub.requests.length, 1);
  });

  test("surfaces INVALID_ARGUMENT with the BadRequest's field violations", async () => {
    const hub = new FakeHub();
    const description = "ERROR: <input>:1:8: undeclared reference to 'objec'";
    hub.faults.push({
      kind: "refuse",
      error: hubStatus(Code.InvalidArgument, "INVALID_ARGUMENT", { field: "selector.filter" }, [{ field: "selector.filter", description }]),
    });
    await assert.rejects(consume(watch(hub.transport(), { ...configmaps, filter: "objec.x" }, noDelay), () => true), (err) => {
      assert.deepEqual(hubError(err).violations, [{ field: "selector.filter", description }]);
      return true;
    });
    assert.equal(hub.requests[0]!.selector?.filter, "objec.x");
  });

  test("reopens a running watch whose credentials expired with fresh ones, and ends when those are refused", async () => {
    const hub = new FakeHub();
    hub.apply("ADDED", "a");
    hub.faults.push(
      { kind: "fail", after: 1, error: hubStatus(Code.Unauthenticated, "UNAUTHENTICATED", { resume_token: "i1.0" }) },
      { kind: "refuse", error: hubStatus(Code.Unauthenticated, "UNAUTHENTICATED") },
    );
    let issued = 0;
    const transport = hub.transport([bearerAuth(() => `token-${++issued}`)]);
    const w = watch(transport, configmaps, { ...noDelay, sendInitialEvents: true });
    await assert.rejects(consume(w, () => false), (err) => hubError(err).code === Code.Unauthenticated);
    assert.deepEqual(hub.authorizations, ["Bearer token-1", "Bearer token-2"]);
    assert.deepEqual(hub.requests.map((r) => r.resumeToken), ["", "i1.1"]);
  });

  test("ends on INTERNAL · OBJECT_UNSENDABLE, which resuming would meet again", async () => {
    const hub = new FakeHub();
    hub.faults.push({ kind: "fail", after: 0, error: hubStatus(Code.Internal, "OBJECT_UNSENDABLE") });
    await assert.rejects(consume(watch(hub.transport(), configmaps, noDelay), () => true), (err) => hubError(err).reason === "OBJECT_UNSENDABLE");
    assert.equal(hub.requests.length, 1);
  });

  test("cancel ends the iteration without an error, also while it waits to reconnect", async () => {
    const hub = new FakeHub();
    hub.apply("ADDED", "a");
    hub.faults.push({ kind: "fail", after: 1, error: hubStatus(Code.Unavailable, "") });
    // A backoff of an hour: only cancel can end the wait.
    const w = watch(hub.transport(), configmaps, { sendInitialEvents: true, backoff: { initialMs: 3_600_000 }, onRetry: () => w.cancel() });
    const events = await consume(w, () => false);
    assert.deepEqual(events, ["ADDED a 1"]);
    assert.equal(hub.requests.length, 1);

    const controller = new AbortController();
    const events2 = await consume(watch(hub.transport(), configmaps, { signal: controller.signal, sendInitialEvents: true }), () => {
      controller.abort();
    });
    assert.deepEqual(events2, ["ADDED a 1"]);
  });

  test("asks for the same fields and previous states on every call, and yields previous objects", async () => {
    const hub = new FakeHub();
    hub.apply("ADDED", "a", { v: "1" });
    hub.faults.push({ kind: "fail", after: 0, error: hubStatus(Code.Unavailable, "") });
    const w = watch(hub.transport(), configmaps, {
      ...noDelay,
      fields: ["data"],
      includePrevious: true,
      objectFormat: "json",
      onRetry: () => hub.apply("MODIFIED", "a", { v: "2" }),
    });
    let event: WatchEvent | undefined;
    for await (const e of w) {
      event = e;
      break;
    }
    assert.deepEqual(event?.previousObject?.["data"], { v: "1" });
    assert.deepEqual(event?.object?.["data"], { v: "2" });
    for (const r of hub.requests) {
      assert.deepEqual([...r.fields], ["data"]);
      assert.equal(r.includePrevious, true);
    }
  });

  test("throws a TypeError for a selector without version or resource", () => {
    const hub = new FakeHub();
    assert.throws(() => watch(hub.transport(), { version: "", resource: "configmaps" }), TypeError);
  });
});
