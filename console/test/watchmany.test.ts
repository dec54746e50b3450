// ResumingWatchMany against the in-memory hub: the initial events of every
// watch, initial-events-end only once all are in, and resumption from the
// last token after a break, and a re-sync after OUT_OF_RANGE, with nothing
// lost or repeated.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Code } from "@informerhub/web";
import { FakeHub, hubStatus } from "../../clients/web/test/fakehub.js";
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

/** Lets the streams run until they wait for a change. */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
}
