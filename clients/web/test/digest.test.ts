// Digest and objectHash on the vectors of the hub's own tests
// (informerhub/digest, computed with Python's hashlib), kept up event by
// event; and the Digest call, against an in-memory hub that answers with
// those vectors.

import assert from "node:assert/strict";
import { test } from "node:test";
import { createRouterTransport } from "@connectrpc/connect";
import { InformerHubService } from "../src/gen/informerhub/v1/informerhub_pb.js";
import { Digest, digest, objectHash, snapshot, type KubeObject, type WatchEvent } from "../src/index.js";

function cm(namespace: string, name: string, uid: string, resourceVersion: string): KubeObject {
  return { apiVersion: "v1", kind: "ConfigMap", metadata: { namespace, name, uid, resourceVersion } };
}

function event(type: WatchEvent["type"], object: KubeObject | null): WatchEvent {
  return {
    type,
    object,
    previousObject: null,
    resourceVersion: object?.metadata?.resourceVersion ?? "",
    resumeToken: "token",
    initialEventsEnd: false,
    fromRelist: false,
    filterError: "",
    resync: false,
    resyncReplaces: false,
  };
}

const a = cm("demo", "a", "u1", "1");
const b = cm("demo", "b", "u2", "2");
const d = cm("demo", "d", "u2", "2");

test("an object's digest is the first 16 bytes of the SHA-256 of its namespace, name, uid and resourceVersion", async () => {
  assert.equal((await Digest.of([a])).toString(), "9d3c49e85ad4e083f7e2adddf824b91d");
  assert.equal((await Digest.of([b])).toString(), "07db7b80ee30f5e92fe749f5890a3ba9");
  assert.equal((await Digest.of([d])).toString(), "acc4e64ed49441c2b374a86ea0f0f7cb");
  assert.equal(await objectHash(a), 0x9d3c49e85ad4e083f7e2adddf824b91dn);
});

test("a set's digest is the sum of its objects' modulo 2^128, in any order", async () => {
  // a + b carries out of the low 64 bits; a + d wraps past 2^128.
  assert.equal((await Digest.of([a, b])).toString(), "a517c5694905d66d27c9f7d3812ef4c6");
  assert.equal((await Digest.of([b, a])).toString(), "a517c5694905d66d27c9f7d3812ef4c6");
  const ad = await Digest.of([a, d]);
  assert.equal(ad.toString(), "4a0130372f692246ab57564c9915b0e8");
  assert.equal((await ad.remove(a)).toString(), "acc4e64ed49441c2b374a86ea0f0f7cb");
  assert.equal((await Digest.of([a, b])).count, 2);
});

test("the empty set's digest is 32 zeros, and removing what was added comes back to it", async () => {
  assert.equal(new Digest().toString(), "0".repeat(32));
  const all = await Digest.of([a, b, d]);
  await all.remove(d);
  await all.remove(a);
  await all.remove(b);
  assert.deepEqual([all.toString(), all.count], ["0".repeat(32), 0]);
});

test("a cluster-scoped object hashes with namespace \"\", and fields cannot run into each other", async () => {
  const node = { metadata: { name: "n1", uid: "u", resourceVersion: "5" } };
  assert.equal(await objectHash(node), await objectHash(cm("", "n1", "u", "5")));
  assert.notEqual(await objectHash(cm("demo", "ab", "u", "1")), await objectHash(cm("demo", "a", "bu", "1")));
});

test("apply keeps the digest of what a watch's events leave, subtracting the state held", async () => {
  const held = new Map<string, KubeObject>(); // name -> object, as a consumer holds them
  const digest = new Digest();
  const apply = async (e: WatchEvent) => {
    const name = e.object!.metadata!.name!;
    await digest.apply(e, held.get(name));
    if (e.type === "DELETED") held.delete(name);
    else held.set(name, e.object!);
  };
  await apply(event("ADDED", a));
  await apply(event("ADDED", b));
  assert.equal(digest.toString(), "a517c5694905d66d27c9f7d3812ef4c6");
  const b2 = cm("demo", "b", "u2", "3");
  await apply(event("MODIFIED", b2));
  assert.equal(digest.toString(), (await Digest.of([a, b2])).toString());
  await digest.apply(event("BOOKMARK", null));
  // A DELETED carries the deletion's resourceVersion: what is subtracted is
  // the state held (a at 1), not the event's object (a at 4).
  await apply(event("DELETED", cm("demo", "a", "u1", "4")));
  const onlyB2 = (await Digest.of([b2])).toString();
  assert.deepEqual([digest.toString(), digest.count], [onlyB2, 1]);
  assert.ok(digest.matches({ count: 1, digest: onlyB2 }));
  assert.ok(digest.matches({ count: 1n, digest: onlyB2 }), "a DigestResponse's bigint count");
  assert.ok(!digest.matches({ count: 2, digest: onlyB2 }), "a different count");
  assert.ok(!digest.matches({ count: 1, digest: (await Digest.of([b])).toString() }), "a different digest");
});

test("an ADDED of an object held replaces it; a MODIFIED or DELETED without the state held rejects, changing nothing", async () => {
  // A re-sync that replaces lists as ADDED what the consumer may hold.
  const a2 = cm("demo", "a", "u1", "7");
  const ab = await Digest.of([a, b]);
  await ab.apply(event("ADDED", a2), a);
  assert.equal(ab.toString(), (await Digest.of([a2, b])).toString());
  await assert.rejects(new Digest().apply(event("MODIFIED", a)), /MODIFIED of "a" needs the state held before it/);
  const held = await Digest.of([a]);
  await assert.rejects(held.apply(event("DELETED", a)), /DELETED of "a" needs the state held before it/);
  await assert.rejects(held.apply(event("MODIFIED", { metadata: { name: "a" } }), a), /needs metadata.name, uid and resourceVersion/);
  assert.deepEqual([held.toString(), held.count], ["9d3c49e85ad4e083f7e2adddf824b91d", 1]);
});

test("digest asks for the selector at the token and answers the hub's digest, which a snapshot's Digest matches", async () => {
  const requests: unknown[] = [];
  const transport = createRouterTransport(({ service }) => {
    service(InformerHubService, {
      async *snapshot() {
        yield { objects: [JSON.stringify(a), JSON.stringify(b)], resumeToken: "s1", resourceVersion: "2", last: true };
      },
      digest(req) {
        requests.push({ selector: req.selector?.labelSelector, resumeToken: req.resumeToken });
        return { count: 2n, digest: "a517c5694905d66d27c9f7d3812ef4c6", resourceVersion: "2", resumeToken: "s1", moved: false };
      },
      async *watch() {},
      listResources: () => ({}),
    });
  });
  const sel = { version: "v1", resource: "configmaps", namespace: "demo", labelSelector: "app=web" };
  const snap = await snapshot(transport, sel);
  const answer = await digest(transport, sel, { resumeToken: snap.resumeToken });
  assert.deepEqual(requests, [{ selector: "app=web", resumeToken: "s1" }]);
  assert.deepEqual(answer, { count: 2, digest: "a517c5694905d66d27c9f7d3812ef4c6", resourceVersion: "2", resumeToken: "s1", moved: false });
  assert.ok((await Digest.of(snap.objects)).matches(answer));
});
