// ResumingWatchMany against the in-memory hub: the initial events of every
// watch, initial-events-end only once all are in, and resumption from the
// last token after a break, and a re-sync after OUT_OF_RANGE, with nothing
// lost or repeated.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Code } from "@informerhub/web";
import { FakeHub, hubStatus } from "../../clients/web/test/fakehub.js";
import { ObjectTable } from "../src/table.js";
import { ResumingWatchMany, type ManyEvent } from "../src/watchmany.js";

/** An event as "index TYPE name", with its marks. */
function show(e: ManyEvent): string {
  const name = e.event.object?.metadata?.name ?? "";
  const marks = [e.event.initialEventsEnd ? "end" : "", e.event.resync ? "resync" : ""].filter((m) => m !== "");
  return [String(e.index), e.event.type, name, ...marks].filter((p) => p !== "").join(" ");
}

test("WatchMany: initial events of each watch, then changes; resumes after a break and re-syncs after OUT_OF_RANGE", async () => {
  const hub = new FakeHub();
  hub.apply("ADDED", "a");
  const retries: string[] = [];
  const w = new ResumingWatchMany(
    hub.transport(),
    [
      { version: "v1", resource: "configmaps", namespace: "demo" },
      { version: "v1", resource: "configmaps", namespace: "demo", labelSelector: "x=y" },
    ],
    { sendInitialEvents: true, backoff: { initialMs: 1, maxMs: 1 }, onRetry: (err) => retries.push(Code[err.code]) },
  );
  const it = w[Symbol.asyncIterator]();
  const next = async (n: number): Promise<string[]> => {
    const out: string[] = [];
    for (let i = 0; i < n; i++) {
      const r = await it.next();
      assert.equal(r.done, false);
      out.push(show(r.value as ManyEvent));
    }
    return out;
  };

  assert.deepEqual(await next(4), ["0 ADDED a", "0 BOOKMARK", "1 ADDED a", "1 BOOKMARK end"]);
  const request = hub.manyRequests[0]!;
  assert.deepEqual(request.watches.map((x) => [x.selector?.labelSelector, x.sendInitialEvents]), [["", true], ["x=y", true]]);
  assert.equal(w.resumeToken, "m1");

  hub.apply("MODIFIED", "a", { v: "2" });
  assert.deepEqual(await next(2), ["0 MODIFIED a", "1 MODIFIED a"]);

  // A break: the watch resumes from its last token, and misses nothing.
  // (The streams pull: a stream waits for a change once read from.)
  const resumed = next(2);
  await settle();
  hub.interrupt(hubStatus(Code.Unavailable, "SHUTTING_DOWN"));
  await settle();
  hub.apply("ADDED", "b");
  assert.deepEqual(await resumed, ["0 ADDED b", "1 ADDED b"]);
  assert.deepEqual(retries, ["Unavailable"]);
  assert.equal(hub.manyRequests.at(-1)!.resumeToken, "m2");
  assert.equal(hub.manyRequests.at(-1)!.watches[0]!.sendInitialEvents, false);
  hub.apply("DELETED", "a");
  assert.deepEqual(await next(2), ["0 DELETED a", "1 DELETED a"]);

  // The token expires while away: everything is listed again, marked
  // resync, the last BOOKMARK too (the table then drops what the list
  // lacked); then changes as before.
  const resynced = next(6);
  await settle();
  hub.interrupt(hubStatus(Code.Unavailable, ""));
  hub.apply("ADDED", "c");
  hub.expiredBefore = 5;
  assert.deepEqual(await resynced, [
    "0 ADDED b resync",
    "0 ADDED c resync",
    "0 BOOKMARK",
    "1 ADDED b resync",
    "1 ADDED c resync",
    "1 BOOKMARK end resync",
  ]);
  assert.deepEqual(retries, ["Unavailable", "Unavailable", "OutOfRange"]);
  assert.deepEqual(hub.manyRequests.slice(-2).map((r) => [r.resumeToken, r.watches[0]!.sendInitialEvents]), [["m4", false], ["", true]]);
  hub.apply("MODIFIED", "c");
  assert.deepEqual(await next(2), ["0 MODIFIED c", "1 MODIFIED c"]);
  assert.equal(w.resumeToken, "m6");

  // Errors that retrying cannot fix end it.
  const refused = it.next();
  await settle();
  hub.interrupt(hubStatus(Code.PermissionDenied, "FORBIDDEN"));
  await assert.rejects(refused, (err: Error) => err.message.includes("FORBIDDEN"));
  w.cancel();
});

test("WatchMany re-sync: a broken listing goes on from where it was; one from the start again forgets the broken attempt's keys; the token stays the one before the re-sync", async () => {
  const hub = new FakeHub();
  hub.apply("ADDED", "a");
  hub.apply("ADDED", "b");
  const table = new ObjectTable();
  const retries: string[] = [];
  const selectors = [
    { version: "v1", resource: "configmaps", namespace: "demo" },
    { version: "v1", resource: "configmaps", namespace: "other" },
  ];
  const w = new ResumingWatchMany(hub.transport(), selectors, {
    sendInitialEvents: true,
    backoff: { initialMs: 1, maxMs: 1, jitter: 0 },
    onRetry: (err) => retries.push(Code[err.code]),
  });
  const it = w[Symbol.asyncIterator]();
  const tokens: string[] = [];
  /** Applies n events to the table as the console does; returns them shown. */
  const next = async (n: number): Promise<string[]> => {
    const out: string[] = [];
    for (let i = 0; i < n; i++) {
      const r = await it.next();
      assert.equal(r.done, false);
      const e = r.value as ManyEvent;
      if (e.resyncStart === true) table.beginResync();
      table.apply(e.event, 0, `${e.index}\u0001`);
      tokens.push(w.resumeToken);
      out.push(show(e) + (e.resyncStart === true ? " start" : ""));
    }
    return out;
  };
  const names = () => table.ordered().filter((r) => r.highlight !== "deleted").map((r) => `${r.scope.slice(0, -1)}:${r.name}`);

  assert.deepEqual(await next(6), ["0 ADDED a", "0 ADDED b", "0 BOOKMARK", "1 ADDED a", "1 ADDED b", "1 BOOKMARK end"]);
  assert.equal(w.resumeToken, "m2");
  assert.deepEqual(names(), ["0:a", "0:b", "1:a", "1:b"]);

  // The token expires while away; the re-sync's listing breaks after two events.
  const pending = next(2);
  await settle();
  hub.interrupt(hubStatus(Code.Unavailable, ""));
  hub.apply("ADDED", "c"); // position 3
  hub.expiredBefore = 3;
  hub.faults.push({ kind: "refuse", error: hubStatus(Code.OutOfRange, "RESUME_TOKEN_EXPIRED") });
  hub.faults.push({ kind: "fail", after: 2, error: hubStatus(Code.Unavailable, "") });
  tokens.length = 0;
  assert.deepEqual(await pending, ["0 ADDED a resync start", "0 ADDED b resync"]);
  // Meanwhile b is deleted, and the listing's position expires too: the
  // next attempt is refused, and the one after lists from the start.
  hub.apply("DELETED", "b"); // position 4
  hub.expiredBefore = 4;
  const rest = next(6);
  assert.deepEqual(await rest, ["0 ADDED a resync start", "0 ADDED c resync", "0 BOOKMARK", "1 ADDED a resync", "1 ADDED c resync", "1 BOOKMARK end resync"]);
  const requests = hub.manyRequests.slice(-4).map((r) => [r.resumeToken, r.watches[0]!.sendInitialEvents]);
  assert.deepEqual(requests, [
    ["m2", false], // refused: OUT_OF_RANGE
    ["", true], // the listing, broken after two events
    ["mi3", false], // goes on from where it was: refused, the position expired
    ["", true], // from the start again
  ]);
  assert.deepEqual(retries, ["Unavailable", "OutOfRange", "Unavailable", "OutOfRange"]);
  // Until the listing ended, the token was the one before the re-sync.
  assert.deepEqual(tokens.slice(0, -1), Array(tokens.length - 1).fill("m2"));
  assert.equal(w.resumeToken, "m4");
  // b, listed by the broken attempt only, is gone.
  assert.deepEqual(names(), ["0:a", "0:c", "1:a", "1:c"]);
  w.cancel();
});

test("WatchMany stopped during a re-sync resumes from the token before it, and re-syncs again", async () => {
  const hub = new FakeHub();
  hub.apply("ADDED", "a");
  const selectors = [
    { version: "v1", resource: "configmaps", namespace: "demo" },
    { version: "v1", resource: "configmaps", namespace: "other" },
  ];
  const w = new ResumingWatchMany(hub.transport(), selectors, { sendInitialEvents: true, backoff: { initialMs: 1, maxMs: 1, jitter: 0 } });
  const it = w[Symbol.asyncIterator]();
  for (let i = 0; i < 4; i++) await it.next();
  assert.equal(w.resumeToken, "m1");
  const pending = it.next();
  await settle();
  // The resumption is refused (OUT_OF_RANGE); halfway through the re-sync's
  // listing, the watch ends on an error retrying cannot fix.
  hub.faults.push(undefined);
  hub.faults.push({ kind: "fail", after: 1, error: hubStatus(Code.PermissionDenied, "FORBIDDEN", { resume_token: "mi2" }) });
  hub.interrupt(hubStatus(Code.Unavailable, ""));
  hub.apply("ADDED", "b");
  hub.expiredBefore = 2;
  const first = await pending;
  assert.equal((first.value as ManyEvent).event.resync, true);
  await assert.rejects(it.next(), (err: Error) => err.message.includes("FORBIDDEN"));
  assert.equal(w.resumeToken, "m1");
  // Resumed (after the cause is fixed): the token is expired, so it re-syncs.
  const resumed = new ResumingWatchMany(hub.transport(), selectors, { resumeToken: w.resumeToken, backoff: { initialMs: 1, maxMs: 1, jitter: 0 } });
  const it2 = resumed[Symbol.asyncIterator]();
  const e = (await it2.next()).value as ManyEvent;
  assert.deepEqual([show(e), e.resyncStart], ["0 ADDED a resync", true]);
  resumed.cancel();
});

/** Lets the streams run until they wait for a change. */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
}
