'use strict';
// Digest and objectHash against the vectors of informerhub/digest's tests
// (computed with Python's hashlib), and kept up event by event. These need
// no hub; client.test.js compares with a real hub's Digest.

const { test } = require('node:test');
const assert = require('node:assert/strict');

const { Digest, objectHash } = require('../informerhub.js');

function cm(namespace, name, uid, resourceVersion) {
  return { apiVersion: 'v1', kind: 'ConfigMap', metadata: { namespace, name, uid, resourceVersion } };
}

const a = cm('demo', 'a', 'u1', '1');
const b = cm('demo', 'b', 'u2', '2');
const d = cm('demo', 'd', 'u2', '2');

test('an object\'s digest is the first 16 bytes of the SHA-256 of its namespace, name, uid and resourceVersion', () => {
  assert.equal(Digest.of([a]).toString(), '9d3c49e85ad4e083f7e2adddf824b91d');
  assert.equal(Digest.of([b]).toString(), '07db7b80ee30f5e92fe749f5890a3ba9');
  assert.equal(Digest.of([d]).toString(), 'acc4e64ed49441c2b374a86ea0f0f7cb');
  assert.equal(objectHash(a), 0x9d3c49e85ad4e083f7e2adddf824b91dn);
});

test('a set\'s digest is the sum of its objects\' modulo 2^128, in any order', () => {
  // a + b carries out of the low 64 bits; a + d wraps past 2^128.
  assert.equal(Digest.of([a, b]).toString(), 'a517c5694905d66d27c9f7d3812ef4c6');
  assert.equal(Digest.of([b, a]).toString(), 'a517c5694905d66d27c9f7d3812ef4c6');
  assert.equal(Digest.of([a, d]).toString(), '4a0130372f692246ab57564c9915b0e8');
  assert.equal(Digest.of([a, d]).remove(a).toString(), 'acc4e64ed49441c2b374a86ea0f0f7cb');
  assert.equal(Digest.of([a, b]).count, 2);
});

test('the empty set\'s digest is 32 zeros, and removing what was added comes back to it', () => {
  assert.equal(new Digest().toString(), '0'.repeat(32));
  const digest = Digest.of([a, b, d]).remove(d).remove(a).remove(b);
  assert.equal(digest.toString(), '0'.repeat(32));
  assert.equal(digest.count, 0);
});

test('a cluster-scoped object hashes with namespace "", and fields cannot run into each other', () => {
  const node = { metadata: { name: 'n1', uid: 'u', resourceVersion: '5' } };
  assert.equal(objectHash(node), objectHash(cm('', 'n1', 'u', '5')));
  assert.notEqual(objectHash(cm('demo', 'ab', 'u', '1')), objectHash(cm('demo', 'a', 'bu', '1')));
});

test('apply keeps the digest of what a watch\'s events leave, subtracting the state held', () => {
  const held = new Map(); // name -> object, as a consumer holds them
  const digest = new Digest();
  const apply = (event) => {
    const name = event.object.metadata.name;
    digest.apply(event, held.get(name));
    if (event.type === 'DELETED') held.delete(name);
    else held.set(name, event.object);
  };
  apply({ type: 'ADDED', object: a });
  apply({ type: 'ADDED', object: b });
  assert.equal(digest.toString(), 'a517c5694905d66d27c9f7d3812ef4c6');
  const b2 = cm('demo', 'b', 'u2', '3');
  apply({ type: 'MODIFIED', object: b2 });
  assert.equal(digest.toString(), Digest.of([a, b2]).toString());
  digest.apply({ type: 'BOOKMARK', object: null });
  // A DELETED carries the deletion's resourceVersion: what is subtracted
  // is the state held (a at 1), not the event's object (a at 4).
  apply({ type: 'DELETED', object: cm('demo', 'a', 'u1', '4') });
  assert.equal(digest.toString(), Digest.of([b2]).toString());
  assert.equal(digest.count, 1);
  assert.ok(digest.matches({ count: 1, digest: Digest.of([b2]).toString() }));
  assert.ok(!digest.matches({ count: 2, digest: Digest.of([b2]).toString() }), 'a different count');
  assert.ok(!digest.matches({ count: 1, digest: Digest.of([b]).toString() }), 'a different digest');
});

test('an ADDED of an object held replaces it; a MODIFIED or DELETED without the state held throws', () => {
  // A re-sync that replaces lists as ADDED what the consumer may hold.
  const a2 = cm('demo', 'a', 'u1', '7');
  assert.equal(Digest.of([a, b]).apply({ type: 'ADDED', object: a2 }, a).toString(), Digest.of([a2, b]).toString());
  assert.throws(() => new Digest().apply({ type: 'MODIFIED', object: a }), /MODIFIED of "a" needs the state held before it/);
  assert.throws(() => Digest.of([a]).apply({ type: 'DELETED', object: a }), /DELETED of "a" needs the state held before it/);
  assert.throws(() => new Digest().add({ metadata: { name: 'x', resourceVersion: '1' } }), /needs metadata.name, uid and resourceVersion/);
});
