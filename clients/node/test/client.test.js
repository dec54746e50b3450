'use strict';
// The client against a real hub and API server. The Go driver
// (test/clients/node_test.go, TestNodeClient) starts both and sets the
// environment; see testlib.js. Each test selects its own ConfigMaps by the
// label case=<test>, so that tests sharing the namespace do not see each
// other's changes. Two more hubs serve one test each: one with a short
// history (re-sync after OUT_OF_RANGE), one with tight limits
// (TOO_MANY_DISTINCT).

const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');

const { connect, status, ObjectFormat, Digest } = require('../informerhub.js');
const { hubEnv, Kube, EventReader, describe: describeEvent } = require('../testlib.js');

// nextPrinted returns the next event the CLI printed (one JSON line each),
// skipping periodic bookmarks but not the end of the initial events.
async function nextPrinted(events, what) {
  for (;;) {
    const e = JSON.parse(await events.next(what));
    if (e.type !== 'BOOKMARK' || e.initialEventsEnd) return e;
  }
}

let env;
let hub;
let kube;

before(() => {
  env = hubEnv();
  hub = connect(env.INFORMERHUB_ADDR, { token: env.INFORMERHUB_TOKEN });
  kube = new Kube(env);
});

after(() => hub?.close());

function selector(testCase) {
  return { version: 'v1', resource: 'configmaps', namespace: env.TEST_NAMESPACE, labelSelector: `case=${testCase}` };
}

/** A write and what the API server answered, as the event it should cause. */
function change(type, object) {
  return { type, name: object.metadata.name, resourceVersion: object.metadata.resourceVersion };
}

/** A deletion: the API server answers with a Status, so its resourceVersion is unknown here. */
function deletion(name) {
  return { type: 'DELETED', name, resourceVersion: null };
}

/**
 * Reads the changes of a watch (periodic bookmarks aside) until as many as
 * expected have arrived, then asserts that they are exactly those: the same
 * types, names and resourceVersions, in order. The last expected change is
 * a write made after all others, so a repeated or extra event shows up as a
 * mismatch rather than going unread. A deletion's resourceVersion must lie
 * between those of its neighbours.
 */
async function expectChanges(reader, expected) {
  const got = [];
  for (const want of expected) {
    const e = await reader.nextChange(`${want.type} ${want.name} (change ${got.length + 1} of ${expected.length})`);
    got.push(e);
  }
  const summary = (list) => list.map((c) => `${c.type} ${c.name}${c.resourceVersion ? ` @${c.resourceVersion}` : ''}`);
  const actual = got.map((e) => ({
    type: e.type,
    name: e.object?.metadata?.name,
    resourceVersion: e.resourceVersion,
  }));
  assert.deepEqual(
    summary(actual.map((a, i) => (expected[i].resourceVersion === null ? { ...a, resourceVersion: null } : a))),
    summary(expected),
    `the changes differ from the writes; got:\n${got.map(describeEvent).join('\n')}`);
  // resourceVersions are opaque to clients; this test knows the API server's
  // are increasing integers, and checks the order and the deletions' ones.
  for (let i = 1; i < got.length; i++) {
    assert.ok(BigInt(got[i - 1].resourceVersion) < BigInt(got[i].resourceVersion),
      `resourceVersions not increasing: ${got.map(describeEvent).join(', ')}`);
  }
  for (const e of got) {
    assert.ok(e.resumeToken, `no resume token on ${describeEvent(e)}`);
    assert.equal(e.object.metadata.resourceVersion, e.resourceVersion, `the object of ${describeEvent(e)}`);
  }
  return got;
}

/**
 * Waits until the hub has seen a write (the API server's answer to it): the
 * hub serves from its cache, which follows the API server an instant later.
 * A watch of sel delivers an event at or after the write's resourceVersion
 * once the hub's cache holds it; initial events and snapshots then do too.
 */
async function hubHasSeen(sel, written, client = hub) {
  const target = BigInt(written.metadata.resourceVersion);
  const reader = new EventReader(client.watch(sel, { sendInitialEvents: true }));
  try {
    for (;;) {
      const e = await reader.next(`the hub to see ${written.metadata.name}@${target}`);
      if (e.resourceVersion && BigInt(e.resourceVersion) >= target) return;
    }
  } finally {
    await reader.close();
  }
}

/** Reads the initial events: ADDED for each of objects (in any order), then the bookmark that ends them. */
async function expectInitialEvents(reader, objects) {
  const added = [];
  for (let i = 0; i < objects.length; i++) {
    const e = await reader.nextChange(`initial ADDED ${i + 1} of ${objects.length}`);
    assert.equal(e.type, 'ADDED', `initial event ${describeEvent(e)}`);
    assert.ok(e.resumeToken);
    added.push(`${e.object.metadata.name}@${e.resourceVersion}`);
  }
  assert.deepEqual(added.sort(), objects.map((o) => `${o.metadata.name}@${o.metadata.resourceVersion}`).sort());
  const end = await reader.nextChange('the bookmark that ends the initial events');
  assert.equal(end.type, 'BOOKMARK', `expected the end of the initial events, got ${describeEvent(end)}`);
  assert.equal(end.initialEventsEnd, true);
  assert.equal(end.fromRelist, false); // no relist here
  assert.equal(end.object, null);
  assert.ok(end.resumeToken);
  return end;
}

/** Iterates a watch and returns the error it ends with. */
async function watchError(watch) {
  const reader = new EventReader(watch);
  try {
    const e = await reader.next('an error');
    assert.fail(`expected an error, got ${describeEvent(e)}`);
  } catch (err) {
    if (err.code === undefined) throw err;
    return err;
  } finally {
    await reader.close();
  }
}

/** The name and data of objects, for comparisons. */
const namesAndData = (objects) => objects.map((o) => [o.metadata.name, o.data]);

describe('watch', () => {
  test('initial events: the objects as ADDED, the bookmark that ends them, then live changes in order', async () => {
    const a = await kube.create('initial-a', { case: 'initial' }, { v: '1' });
    const b = await kube.create('initial-b', { case: 'initial' }, { v: '1' });
    await kube.create('other', { case: 'not-selected' }); // filtered out by the selector
    await hubHasSeen(selector('initial'), b);

    const reader = new EventReader(hub.watch(selector('initial'), { sendInitialEvents: true }));
    try {
      await expectInitialEvents(reader, [a, b]);

      const c = await kube.create('initial-c', { case: 'initial' });
      const a2 = await kube.modify('initial-a', { v: '2' });
      await kube.delete('initial-b');
      const d = await kube.create('initial-d', { case: 'initial' });
      const got = await expectChanges(reader, [
        change('ADDED', c), change('MODIFIED', a2), deletion('initial-b'), change('ADDED', d),
      ]);
      assert.equal(got[1].object.data.v, '2');
    } finally {
      await reader.close();
    }
  });

  test('resume: after a disconnect, exactly the changes made meanwhile, in order', async () => {
    const a = await kube.create('resume-a', { case: 'resume' }, { v: '1' });
    await hubHasSeen(selector('resume'), a);
    const reader = new EventReader(hub.watch(selector('resume'), { sendInitialEvents: true }));
    await expectInitialEvents(reader, [a]);
    const b = await kube.create('resume-b', { case: 'resume' });
    const [added] = await expectChanges(reader, [change('ADDED', b)]);

    // Disconnect: ending the iteration cancels the call.
    await reader.close();

    const c = await kube.create('resume-c', { case: 'resume' }, { v: '1' });
    const a2 = await kube.modify('resume-a', { v: '2' });
    await kube.delete('resume-b');
    const c2 = await kube.modify('resume-c', { v: '2' });

    const resumed = new EventReader(hub.watch(selector('resume'), { resumeToken: added.resumeToken }));
    try {
      const end = await kube.create('resume-end', { case: 'resume' });
      await expectChanges(resumed, [
        change('ADDED', c), change('MODIFIED', a2), deletion('resume-b'), change('MODIFIED', c2), change('ADDED', end),
      ]);
    } finally {
      await resumed.close();
    }
  });

  test('resumingWatch reconnects by itself after the connection drops, losing and repeating nothing', async () => {
    const a = await kube.create('reconnect-a', { case: 'reconnect' }, { v: '1' });
    await hubHasSeen(selector('reconnect'), a);
    const proxy = await startProxy(env.INFORMERHUB_ADDR);
    const client = connect(proxy.address, { token: env.INFORMERHUB_TOKEN, backoff: { initialMs: 50, maxMs: 500 } });
    const retries = [];
    let retried;
    const watch = client.resumingWatch(selector('reconnect'), {
      sendInitialEvents: true,
      onRetry: (err) => {
        retries.push(err);
        retried?.();
      },
    });
    const reader = new EventReader(watch);
    try {
      await expectInitialEvents(reader, [a]);
      const live = await kube.create('reconnect-live', { case: 'reconnect' });
      await expectChanges(reader, [change('ADDED', live)]);

      // Cut the connection and refuse new ones; wait until the watch has
      // noticed (its first retry), then change things while it is cut off.
      const noticed = new Promise((resolve) => { retried = resolve; });
      proxy.cut();
      await withTimeout(noticed, 20000, 'the watch to notice the disconnect');
      const b = await kube.create('reconnect-b', { case: 'reconnect' });
      const a2 = await kube.modify('reconnect-a', { v: '2' });
      await kube.delete('reconnect-b');
      proxy.restore();
      const end = await kube.create('reconnect-end', { case: 'reconnect' });

      await expectChanges(reader, [change('ADDED', b), change('MODIFIED', a2), deletion('reconnect-b'), change('ADDED', end)]);
      assert.ok(retries.length > 0);
      assert.ok(retries.every((err) => err.code === status.UNAVAILABLE), `retried on ${retries.map((e) => e.message).join('; ')}`);
    } finally {
      await reader.close();
      client.close();
      await proxy.close();
    }
  });
});

describe('filter', () => {
  const stateOn = 'has(object.data) && has(object.data.state) && object.data.state == "on"';

  test('an update that makes the filter true adds the object; one that makes it false deletes it, in its last matching state', async () => {
    const x = await kube.create('filter-x', { case: 'filter' }, { state: 'off' });
    const y = await kube.create('filter-y', { case: 'filter' }, { state: 'on' });
    await hubHasSeen(selector('filter'), y);

    const reader = new EventReader(hub.watch({ ...selector('filter'), filter: stateOn }, { sendInitialEvents: true }));
    try {
      await expectInitialEvents(reader, [y]); // not x: its state is off
      const xOn = await kube.modify('filter-x', { state: 'on' });
      const xMore = await kube.modify('filter-x', { more: '1' });
      const xOff = await kube.modify('filter-x', { state: 'off' });
      await kube.modify('filter-x', { more: '2' }); // still off: nothing
      const z = await kube.create('filter-z', { case: 'filter' }, { state: 'on' });
      const got = await expectChanges(reader, [
        change('ADDED', xOn), change('MODIFIED', xMore), change('DELETED', xOff), change('ADDED', z),
      ]);
      assert.equal(x.metadata.uid, got[0].object.metadata.uid);
      // It left with the change to off, in the last state the filter selected.
      assert.deepEqual(got[2].object.data, { state: 'on', more: '1' });
    } finally {
      await reader.close();
    }
  });

  test('a filter that does not compile is INVALID_ARGUMENT naming selector.filter; a resuming watch does not retry it', async () => {
    const err = await watchError(hub.watch({ ...selector('x'), filter: 'object.data.(' }));
    assert.equal(err.code, status.INVALID_ARGUMENT, err.message);
    assert.equal(err.reason, 'INVALID_ARGUMENT');
    assert.equal(err.errorInfo.metadata.field, 'selector.filter');
    assert.deepEqual(err.fieldViolations.map((v) => v.field), ['selector.filter']);
    assert.ok(err.fieldViolations[0].description, 'the violation says what is wrong');

    const retries = [];
    const resuming = await watchError(hub.resumingWatch({ ...selector('x'), filter: 'object.data.(' }, { onRetry: (e) => retries.push(e) }));
    assert.equal(resuming.code, status.INVALID_ARGUMENT, resuming.message);
    assert.deepEqual(retries, []);
  });
});

describe('fields', () => {
  test('objects hold only the fields asked for, and what names them; a MODIFIED of other fields is not sent', async () => {
    const a = await kube.create('fields-a', { case: 'fields' }, { watched: '1', other: '1' });
    await hubHasSeen(selector('fields'), a);

    const reader = new EventReader(hub.watch(selector('fields'), { sendInitialEvents: true, fields: ['data.watched'] }));
    try {
      const added = await reader.nextChange('the initial ADDED');
      assert.equal(added.type, 'ADDED');
      assert.deepEqual(added.object, {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: 'fields-a', namespace: env.TEST_NAMESPACE, uid: a.metadata.uid, resourceVersion: a.metadata.resourceVersion },
        data: { watched: '1' },
      });
      assert.equal((await reader.nextChange('the end of the initial events')).initialEventsEnd, true);

      await kube.modify('fields-a', { other: '2' }); // not sent
      const a3 = await kube.modify('fields-a', { watched: '2' });
      await kube.delete('fields-a');
      const b = await kube.create('fields-b', { case: 'fields' }, { watched: 'b' });
      const got = await expectChanges(reader, [change('MODIFIED', a3), deletion('fields-a'), change('ADDED', b)]);
      assert.deepEqual(namesAndData(got.map((e) => e.object)),
        [['fields-a', { watched: '2' }], ['fields-a', { watched: '2' }], ['fields-b', { watched: 'b' }]]);
      assert.ok(got.every((e) => e.object.metadata.labels === undefined), 'labels were not asked for');
    } finally {
      await reader.close();
    }
  });

  test('a path that cannot be valid is INVALID_ARGUMENT naming fields', async () => {
    const err = await watchError(hub.watch(selector('x'), { fields: ['metadata..name'] }));
    assert.equal(err.code, status.INVALID_ARGUMENT, err.message);
    assert.deepEqual(err.fieldViolations.map((v) => v.field), ['fields']);
  });
});

describe('includePrevious', () => {
  test('a MODIFIED carries the state before the change; ADDED and DELETED carry none', async () => {
    const a = await kube.create('previous-a', { case: 'previous' }, { v: '1' });
    await hubHasSeen(selector('previous'), a);

    const reader = new EventReader(hub.watch(selector('previous'), { sendInitialEvents: true, includePrevious: true }));
    try {
      const added = await reader.nextChange('the initial ADDED');
      assert.deepEqual([added.type, added.previousObject], ['ADDED', null]);
      assert.equal((await reader.nextChange('the end of the initial events')).initialEventsEnd, true);

      const a2 = await kube.modify('previous-a', { v: '2' });
      const a3 = await kube.modify('previous-a', { v: '3' });
      await kube.delete('previous-a');
      const end = await kube.create('previous-end', { case: 'previous' });
      const got = await expectChanges(reader, [change('MODIFIED', a2), change('MODIFIED', a3), deletion('previous-a'), change('ADDED', end)]);
      // The states before, exactly as the API server returned them.
      assert.deepEqual(got[0].previousObject, a);
      assert.deepEqual(got[1].previousObject, a2);
      assert.deepEqual(got.slice(2).map((e) => e.previousObject), [null, null]);
    } finally {
      await reader.close();
    }
  });
});

describe('objectFormat struct', () => {
  test('a watch delivers the same plain objects as with JSON, previous states and projections too', async () => {
    const a = await kube.create('struct-a', { case: 'struct' }, { v: '1' });
    await hubHasSeen(selector('struct'), a);

    const options = { sendInitialEvents: true, includePrevious: true, fields: ['data', 'metadata.labels'] };
    const asJSON = new EventReader(hub.watch(selector('struct'), options));
    const asStruct = new EventReader(hub.watch(selector('struct'), { ...options, objectFormat: ObjectFormat.STRUCT }));
    try {
      const [fromJSON, fromStruct] = [await asJSON.nextChange('ADDED (JSON)'), await asStruct.nextChange('ADDED (struct)')];
      assert.deepStrictEqual(fromStruct.object, fromJSON.object);
      assert.deepStrictEqual(fromStruct.object.metadata.labels, { case: 'struct' }); // nested objects, not Structs
      for (const reader of [asJSON, asStruct]) assert.equal((await reader.nextChange('the end of the initial events')).initialEventsEnd, true);

      const a2 = await kube.modify('struct-a', { v: '2', list: '["x"]' });
      const end = await kube.create('struct-end', { case: 'struct' });
      const expected = [change('MODIFIED', a2), change('ADDED', end)];
      const [gotJSON, gotStruct] = [await expectChanges(asJSON, expected), await expectChanges(asStruct, expected)];
      for (let i = 0; i < expected.length; i++) {
        assert.deepStrictEqual(gotStruct[i].object, gotJSON[i].object);
        assert.deepStrictEqual(gotStruct[i].previousObject, gotJSON[i].previousObject);
      }
      assert.deepStrictEqual(gotStruct[0].previousObject.data, { v: '1' });
    } finally {
      await asJSON.close();
      await asStruct.close();
    }
  });
});

describe('watchMany', () => {
  test('initial events of every watch, one initialEventsEnd, then each watch\'s changes; a composite token resumes them all exactly', async () => {
    const a = await kube.create('many-a1', { case: 'many-a' });
    const b = await kube.create('many-b1', { case: 'many-b' });
    await hubHasSeen(selector('many-a'), a);
    await hubHasSeen(selector('many-b'), b);
    const watches = [
      { selector: selector('many-a'), sendInitialEvents: true },
      { selector: selector('many-b'), sendInitialEvents: true },
    ];
    const reader = new EventReader(hub.watchMany(watches));
    const describeMany = (m) => `${m.index} ${m.event.type} ${m.event.object?.metadata?.name ?? ''}${m.initialEventsEnd ? ' end' : ''}`;
    const nextChange = async (what) => {
      for (;;) {
        const m = await reader.next(what);
        if (m.event.type !== 'BOOKMARK' || m.event.initialEventsEnd) return m;
      }
    };
    let last;
    try {
      const initial = [];
      for (let i = 0; i < 4; i++) initial.push(await nextChange(`initial event ${i + 1}`));
      assert.deepEqual(initial.map(describeMany), ['0 ADDED many-a1', '0 BOOKMARK ', '1 ADDED many-b1', '1 BOOKMARK  end']);
      for (const m of initial) assert.ok(m.resumeToken);
      await kube.create('many-b2', { case: 'many-b' });
      last = await nextChange('the ADDED of many-b2');
      assert.equal(describeMany(last), '1 ADDED many-b2');
    } finally {
      await reader.close();
    }

    // Changes while no one watches; then the second watch alone resumes.
    await kube.create('many-a2', { case: 'many-a' });
    await kube.modify('many-b1', { v: '2' });
    const resumed = new EventReader(hub.watchMany([watches[1]], { resumeToken: last.resumeToken }));
    try {
      const m = await resumed.next('the MODIFIED of many-b1');
      assert.equal(`${m.index} ${m.event.type} ${m.event.object.metadata.name}`, '0 MODIFIED many-b1');
    } finally {
      await resumed.close();
    }
  });

  test('a watch the identity may not make fails the call, naming it by index', async () => {
    const err = await watchError(hub.watchMany([
      { selector: selector('many-denied') },
      { selector: { version: 'v1', resource: 'secrets', namespace: env.TEST_NAMESPACE } },
    ]));
    assert.equal(err.code, status.PERMISSION_DENIED);
    assert.equal(err.errorInfo?.metadata?.index, '1');
  });
});

describe('count', () => {
  test('the current counts per group, then new counts when they change', async () => {
    await kube.create('count-a', { case: 'count', tier: 'web' });
    const b = await kube.create('count-b', { case: 'count', tier: 'web' });
    await hubHasSeen(selector('count'), b);
    const reader = new EventReader(hub.count(selector('count'), { groupBy: 'label:tier' }));
    try {
      const first = await reader.next('the first counts');
      assert.deepEqual(first.groups, { web: 2 });
      assert.equal(first.total, 2);
      assert.ok(first.resourceVersion);
      await kube.create('count-c', { case: 'count' });
      const next = await reader.next('the counts after a create');
      assert.deepEqual(next.groups, { web: 2, '': 1 });
      assert.equal(next.total, 3);
    } finally {
      await reader.close();
    }
  });
});

describe('snapshot', () => {
  test('with a filter, fields and objectFormat struct: the selected objects, projected, as plain objects', async () => {
    const a = await kube.create('snapview-a', { case: 'snapshot-view' }, { keep: 'a', drop: 'a' });
    const b = await kube.create('snapview-b', { case: 'snapshot-view' }, { keep: 'b' });
    const c = await kube.create('snapview-c', { case: 'snapshot-view' }, { drop: 'c' });
    await hubHasSeen(selector('snapshot-view'), c);

    const sel = { ...selector('snapshot-view'), filter: 'has(object.data) && has(object.data.keep)' };
    const json = await hub.snapshot(sel, { fields: ['data.keep'] });
    assert.deepEqual(namesAndData(json.objects), [['snapview-a', { keep: 'a' }], ['snapview-b', { keep: 'b' }]]);
    assert.deepEqual(json.objects.map((o) => o.metadata.resourceVersion), [a, b].map((o) => o.metadata.resourceVersion));
    assert.ok(json.objects.every((o) => o.metadata.labels === undefined), 'labels were not asked for');

    const struct = await hub.snapshot(sel, { fields: ['data.keep'], objectFormat: ObjectFormat.STRUCT });
    assert.deepStrictEqual(struct.objects, json.objects);
    assert.equal(struct.resourceVersion !== '' && struct.resumeToken !== '', true);
  });

  test('all pages of objects and a token from which a watch yields exactly the later changes', async () => {
    // Three objects of 450 KB: more than the hub's pages hold (1 MiB by
    // default), so the snapshot spans pages.
    const big = 'x'.repeat(450 * 1024);
    const a = await kube.create('snap-a', { case: 'snapshot' }, { big });
    const b = await kube.create('snap-b', { case: 'snapshot' }, { big });
    const c = await kube.create('snap-c', { case: 'snapshot' }, { big });
    await hubHasSeen(selector('snapshot'), c);

    const snap = await hub.snapshot(selector('snapshot'));
    assert.deepEqual(
      snap.objects.map((o) => `${o.metadata.name}@${o.metadata.resourceVersion}`),
      [a, b, c].map((o) => `${o.metadata.name}@${o.metadata.resourceVersion}`));
    assert.equal(snap.objects[2].data.big.length, big.length);
    assert.ok(snap.resumeToken);
    assert.ok(BigInt(snap.resourceVersion) >= BigInt(c.metadata.resourceVersion));

    const a2 = await kube.modify('snap-a', { big: 'small' });
    await kube.delete('snap-b');
    const d = await kube.create('snap-d', { case: 'snapshot' });

    const reader = new EventReader(hub.watch(selector('snapshot'), { resumeToken: snap.resumeToken }));
    try {
      const end = await kube.create('snap-end', { case: 'snapshot' });
      await expectChanges(reader, [change('MODIFIED', a2), deletion('snap-b'), change('ADDED', d), change('ADDED', end)]);
    } finally {
      await reader.close();
    }
  });
});

describe('digest', () => {
  test('a Digest of a snapshot, kept up with the watch from its token, matches the hub\'s at the snapshot\'s token and at the last event\'s', async () => {
    const sel = selector('digest');
    await kube.create('digest-a', { case: 'digest' }, { v: '1' });
    const b = await kube.create('digest-b', { case: 'digest' });
    await hubHasSeen(sel, b);

    const snap = await hub.snapshot(sel);
    const digest = Digest.of(snap.objects);
    const atSnapshot = await hub.digest(sel, { resumeToken: snap.resumeToken });
    assert.deepEqual([atSnapshot.count, atSnapshot.digest, atSnapshot.moved], [2, digest.toString(), false]);
    assert.ok(digest.matches(atSnapshot));
    assert.ok(atSnapshot.resumeToken && atSnapshot.resourceVersion);

    // What a consumer holds, by name, kept up with the digest.
    const held = new Map(snap.objects.map((o) => [o.metadata.name, o]));
    const a2 = await kube.modify('digest-a', { v: '2' });
    await kube.delete('digest-b');
    const c = await kube.create('digest-c', { case: 'digest' });
    const reader = new EventReader(hub.watch(sel, { resumeToken: snap.resumeToken }));
    let events;
    try {
      events = await expectChanges(reader, [change('MODIFIED', a2), deletion('digest-b'), change('ADDED', c)]);
    } finally {
      await reader.close();
    }
    // The DELETED carries the deletion's resourceVersion: the digest must
    // subtract the state held, as apply does.
    assert.notEqual(events[1].object.metadata.resourceVersion, held.get('digest-b').metadata.resourceVersion);
    for (const e of events) {
      const name = e.object.metadata.name;
      digest.apply(e, held.get(name));
      if (e.type === 'DELETED') held.delete(name);
      else held.set(name, e.object);
    }
    assert.equal(digest.toString(), Digest.of([a2, c]).toString(), 'the digest of what the API server answered');

    const atLast = await hub.digest(sel, { resumeToken: events.at(-1).resumeToken });
    assert.deepEqual([atLast.count, atLast.digest, atLast.moved], [2, digest.toString(), false]);
    assert.ok(!digest.matches(atSnapshot), 'the snapshot\'s digest no longer matches');
  });

  test('a garbage resume token is INVALID_ARGUMENT with reason INVALID_RESUME_TOKEN; an unknown option a TypeError', async () => {
    await assert.rejects(hub.digest(selector('digest-garbage'), { resumeToken: 'garbage' }), (err) => {
      assert.equal(err.code, status.INVALID_ARGUMENT, err.message);
      assert.equal(err.reason, 'INVALID_RESUME_TOKEN');
      return true;
    });
    await assert.rejects(hub.digest(selector('digest-garbage'), { resume_token: 'x' }), /digest has no option resume_token/);
  });
});

describe('listResources', () => {
  test('lists configmaps as watchable in the namespace', async () => {
    const resources = await hub.listResources(env.TEST_NAMESPACE);
    const cm = resources.find((r) => r.group === '' && r.resource === 'configmaps');
    assert.ok(cm, `no configmaps in ${JSON.stringify(resources)}`);
    assert.equal(cm.version, 'v1');
    assert.equal(cm.kind, 'ConfigMap');
    assert.equal(cm.namespaced, true);
    // The fields a field selector may name on configmaps.
    assert.deepEqual(cm.selectableFields, ['metadata.name', 'metadata.namespace']);
    // The reader may watch configmaps, and nothing else.
    assert.ok(!resources.some((r) => r.resource === 'secrets'));
  });
});

describe('errors', () => {
  test('an invalid label selector is INVALID_ARGUMENT, naming the field', async () => {
    const err = await watchError(hub.watch({ ...selector('x'), labelSelector: 'app in (' }));
    assert.equal(err.code, status.INVALID_ARGUMENT, err.message);
    assert.equal(err.reason, 'INVALID_ARGUMENT');
    assert.ok(err.fieldViolations.some((v) => v.field.includes('label_selector')), JSON.stringify(err.fieldViolations));
  });

  test('a resuming watch does not retry what retrying cannot fix', async () => {
    const retries = [];
    const err = await watchError(hub.resumingWatch({ ...selector('x'), labelSelector: 'app in (' }, { onRetry: (e) => retries.push(e) }));
    assert.equal(err.code, status.INVALID_ARGUMENT, err.message);
    assert.deepEqual(retries, []);
  });

  test('a field selector on a field the resource type does not have is INVALID_ARGUMENT naming selector.field_selector', async () => {
    const err = await watchError(hub.watch({ ...selector('x'), fieldSelector: 'data.v=1' }));
    assert.equal(err.code, status.INVALID_ARGUMENT, err.message);
    assert.deepEqual(err.fieldViolations.map((v) => v.field), ['selector.field_selector']);
    // It names the fields there are.
    assert.match(err.fieldViolations[0].description, /metadata\.name/);
  });

  test('a garbage resume token is INVALID_ARGUMENT with reason INVALID_RESUME_TOKEN', async () => {
    const err = await watchError(hub.watch(selector('x'), { resumeToken: 'garbage' }));
    assert.equal(err.code, status.INVALID_ARGUMENT, err.message);
    assert.equal(err.reason, 'INVALID_RESUME_TOKEN');
    assert.equal(err.errorInfo.domain, 'informerhub.io');
  });

  test('no token is UNAUTHENTICATED', async () => {
    const anonymous = connect(env.INFORMERHUB_ADDR);
    try {
      await assert.rejects(anonymous.snapshot(selector('x')), (err) => {
        assert.equal(err.code, status.UNAUTHENTICATED, err.message);
        assert.equal(err.reason, 'UNAUTHENTICATED');
        return true;
      });
    } finally {
      anonymous.close();
    }
  });

  test('a resource the identity may not list is PERMISSION_DENIED', async () => {
    await assert.rejects(hub.snapshot({ version: 'v1', resource: 'secrets', namespace: env.TEST_NAMESPACE }), (err) => {
      assert.equal(err.code, status.PERMISSION_DENIED, err.message);
      assert.equal(err.reason, 'FORBIDDEN');
      return true;
    });
  });
});

describe('re-sync', () => {
  test('a resuming watch whose token expired lists again with the same filter and fields, then goes on with them', async () => {
    // This hub keeps INFORMERHUB_SHORT_HISTORY_SIZE changes: a token from
    // inside initial events, which only its history can resume, expires
    // after that many more.
    const short = connect(env.INFORMERHUB_SHORT_HISTORY_ADDR, { token: env.INFORMERHUB_TOKEN, backoff: { initialMs: 50, maxMs: 500 } });
    const sel = { ...selector('resync'), filter: 'has(object.data) && has(object.data.state) && object.data.state == "on"' };
    const fields = ['data.state'];
    try {
      await kube.create('resync-a', { case: 'resync' }, { state: 'on', other: 'a' });
      await kube.create('resync-b', { case: 'resync' }, { state: 'on', other: 'b' });
      const c = await kube.create('resync-c', { case: 'resync' }, { state: 'off' });
      await hubHasSeen(selector('resync'), c, short);
      const first = new EventReader(short.watch(sel, { sendInitialEvents: true, fields }));
      const inside = await first.nextChange('the first initial event');
      assert.equal(inside.object.metadata.name, 'resync-a');
      await first.close();

      await kube.modify('resync-a', { state: 'off' }); // leaves
      const cOn = await kube.modify('resync-c', { state: 'on' }); // enters
      let filler = await kube.create('resync-filler', { case: 'resync-filler' });
      for (let i = 0; i < Number(env.INFORMERHUB_SHORT_HISTORY_SIZE); i++) filler = await kube.modify('resync-filler', { i: String(i) });
      await hubHasSeen(selector('resync-filler'), filler, short);

      const retries = [];
      const watch = short.resumingWatch(sel, { resumeToken: inside.resumeToken, fields, onRetry: (err) => retries.push(err) });
      const reader = new EventReader(watch);
      try {
        const listed = [];
        for (;;) {
          const e = await reader.next('the re-sync');
          assert.equal(e.resync, true, `not a re-sync event: ${describeEvent(e)}`);
          assert.equal(e.resyncReplaces, true); // a watch from a saved token: what the caller holds is unknown
          if (e.type === 'BOOKMARK') break;
          listed.push(e);
        }
        // What the filter selects now (b, and c which entered; not a, which
        // left), projected by fields.
        assert.deepEqual(listed.map((e) => e.type), ['ADDED', 'ADDED']);
        assert.deepEqual(namesAndData(listed.map((e) => e.object)), [['resync-b', { state: 'on' }], ['resync-c', { state: 'on' }]]);
        assert.equal(listed[1].resourceVersion, cOn.metadata.resourceVersion);
        assert.deepEqual(retries.map((err) => [err.code, err.reason]), [[status.OUT_OF_RANGE, 'RESUME_TOKEN_EXPIRED']]);

        await kube.modify('resync-b', { other: 'b2' }); // not in fields: not sent
        const bOff = await kube.modify('resync-b', { state: 'off' }); // leaves
        const d = await kube.create('resync-d', { case: 'resync' }, { state: 'on', other: 'd' });
        const got = await expectChanges(reader, [change('DELETED', bOff), change('ADDED', d)]);
        assert.deepEqual(got[1].object.data, { state: 'on' });
      } finally {
        await reader.close();
      }
    } finally {
      short.close();
    }
  });
});

describe('limits', () => {
  test('one distinct filter or projection too many is RESOURCE_EXHAUSTED TOO_MANY_DISTINCT; a resuming watch waits for room', async () => {
    // This hub allows one distinct filter and one distinct projection per
    // resource type at once.
    const limited = connect(env.INFORMERHUB_LIMITED_ADDR, { token: env.INFORMERHUB_TOKEN, backoff: { initialMs: 50, maxMs: 200 } });
    const open = [];
    /** A watch that holds its filter and projection once its initial events have ended. */
    const started = async (sel, options = {}) => {
      const reader = new EventReader(limited.watch(sel, { sendInitialEvents: true, ...options }));
      open.push(reader);
      assert.equal((await reader.nextChange('the end of the initial events')).initialEventsEnd, true);
      return reader;
    };
    try {
      const holder = await started({ ...selector('limits'), filter: 'true' }, { fields: ['data'] });

      const filters = await watchError(limited.watch({ ...selector('limits'), filter: '!false' }));
      assert.equal(filters.code, status.RESOURCE_EXHAUSTED, filters.message);
      assert.equal(filters.reason, 'TOO_MANY_DISTINCT');
      assert.deepEqual([filters.errorInfo.metadata.limit, filters.errorInfo.metadata.max], ['max-filters-per-resource', '1']);
      const projections = await watchError(limited.watch(selector('limits'), { fields: ['metadata.labels'] }));
      assert.equal(projections.reason, 'TOO_MANY_DISTINCT');
      assert.equal(projections.errorInfo.metadata.limit, 'max-projections-per-resource');

      // The expression and the projection in use are fine.
      const same = await started({ ...selector('limits'), filter: 'true' }, { fields: ['data'] });

      let noticed;
      const refused = new Promise((resolve) => { noticed = resolve; });
      const retries = [];
      const waiting = new EventReader(limited.resumingWatch({ ...selector('limits'), filter: '!false' }, {
        sendInitialEvents: true,
        onRetry: (err) => {
          retries.push(err);
          noticed();
        },
      }));
      open.push(waiting);
      await withTimeout(refused, 20000, 'the resuming watch to be refused');
      assert.equal(retries[0].reason, 'TOO_MANY_DISTINCT');
      // Once the other filter is gone, a retry gets in.
      await holder.close();
      await same.close();
      assert.equal((await waiting.nextChange('the initial events, once there is room')).initialEventsEnd, true);
      assert.ok(retries.every((err) => err.reason === 'TOO_MANY_DISTINCT'), retries.map((e) => e.message).join('; '));
    } finally {
      for (const reader of open) await reader.close();
      limited.close();
    }
  });
});

describe('example CLI', () => {
  let tokenFile;
  before(() => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'informerhub-node-'));
    tokenFile = path.join(dir, 'token');
    fs.writeFileSync(tokenFile, env.INFORMERHUB_TOKEN);
  });

  function run(...args) {
    const child = spawn(process.execPath, [path.join(__dirname, '..', 'example.js'),
      '--addr', env.INFORMERHUB_ADDR, '--token-file', tokenFile, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    const stderr = [];
    child.stderr.on('data', (d) => stderr.push(d));
    const exited = new Promise((resolve) => child.on('close', (code, signal) => resolve({ code, signal, stderr: Buffer.concat(stderr).toString() })));
    return { child, exited, lines: readline.createInterface({ input: child.stdout }) };
  }

  test('snapshot prints one JSON object per line and the token to resume from', async () => {
    const a = await kube.create('cli-a', { case: 'cli' });
    await hubHasSeen(selector('cli'), a);
    const { lines, exited } = run('snapshot', 'configmaps', '-n', env.TEST_NAMESPACE, '-l', 'case=cli');
    const objects = [];
    for await (const line of lines) objects.push(JSON.parse(line));
    const { code, stderr } = await withTimeout(exited, 20000, 'the snapshot command to exit');
    assert.equal(code, 0, stderr);
    assert.deepEqual(objects.map((o) => o.metadata.name), ['cli-a']);
    assert.equal(objects[0].metadata.resourceVersion, a.metadata.resourceVersion);
    assert.match(stderr, /watch the changes after them with: --resume-token \S+/);
  });

  test('watch prints one JSON line per event, and on SIGINT the token to resume from', async () => {
    const { child, lines, exited } = run('watch', 'configmaps', '-n', env.TEST_NAMESPACE, '-l', 'case=cli-watch');
    const events = new EventReader(lines);
    const next = (what) => nextPrinted(events, what);
    try {
      const end = await next('the end of the initial events');
      assert.equal(end.initialEventsEnd, true);
      const b = await kube.create('cli-watch-b', { case: 'cli-watch' });
      const added = await next('ADDED cli-watch-b');
      assert.deepEqual([added.type, added.object.metadata.name, added.resourceVersion], ['ADDED', 'cli-watch-b', b.metadata.resourceVersion]);
      assert.ok(added.resumeToken);
      child.kill('SIGINT');
      const { code, stderr } = await withTimeout(exited, 20000, 'the watch command to exit on SIGINT');
      assert.equal(code, 0, stderr);
      // The token of the last event printed (a periodic bookmark may follow the ADDED).
      let last = added;
      for (;;) {
        try {
          last = JSON.parse(await events.next('the rest of the output'));
        } catch (err) {
          if (/the watch ended/.test(err.message)) break;
          throw err;
        }
      }
      assert.ok(stderr.includes(`resume with: --resume-token ${last.resumeToken}`), stderr);
    } finally {
      child.kill();
    }
  });

  test('watch with --filter, --field, --include-previous and --object-format struct', async () => {
    const off = await kube.create('cli-view-off', { case: 'cli-view' }, { state: 'off', v: '1' });
    const a = await kube.create('cli-view-a', { case: 'cli-view' }, { state: 'on', v: '1' });
    await hubHasSeen(selector('cli-view'), off);
    const { child, lines, exited } = run('watch', 'configmaps', '-n', env.TEST_NAMESPACE, '-l', 'case=cli-view',
      '--filter', 'object.data.state == "on"', '--field', 'data.v', '--include-previous', '--object-format', 'struct');
    const events = new EventReader(lines);
    const next = (what) => nextPrinted(events, what);
    try {
      const added = await next('ADDED cli-view-a');
      assert.deepEqual([added.type, added.object.metadata.name, added.object.data], ['ADDED', 'cli-view-a', { v: '1' }]);
      assert.equal(added.object.metadata.labels, undefined);
      assert.equal((await next('the end of the initial events')).initialEventsEnd, true);
      const a2 = await kube.modify('cli-view-a', { v: '2' });
      const modified = await next('MODIFIED cli-view-a');
      assert.deepEqual([modified.type, modified.resourceVersion], ['MODIFIED', a2.metadata.resourceVersion]);
      assert.deepEqual([modified.object.data, modified.previousObject.data], [{ v: '2' }, { v: '1' }]);
      assert.equal(modified.previousObject.metadata.resourceVersion, a.metadata.resourceVersion);
      child.kill('SIGINT');
      const { code, stderr } = await withTimeout(exited, 20000, 'the watch command to exit on SIGINT');
      assert.equal(code, 0, stderr);
    } finally {
      child.kill();
    }
  });

  test('resources prints each resource type with the fields a field selector may name', async () => {
    const { lines, exited } = run('resources', '-n', env.TEST_NAMESPACE);
    const resources = [];
    for await (const line of lines) resources.push(JSON.parse(line));
    const { code, stderr } = await withTimeout(exited, 20000, 'the resources command to exit');
    assert.equal(code, 0, stderr);
    const cm = resources.find((r) => r.group === '' && r.resource === 'configmaps');
    assert.deepEqual(cm?.selectableFields, ['metadata.name', 'metadata.namespace'], JSON.stringify(resources));
  });
});

/** Rejects if promise does not settle within ms. */
async function withTimeout(promise, ms, what) {
  let timer;
  try {
    return await Promise.race([promise, new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms}ms waiting for ${what}`)), ms);
    })]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A TCP proxy to target on a loopback port, whose connections can be cut:
 * cut() closes them and refuses new ones until restore().
 */
async function startProxy(target) {
  const [host, port] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
  const sockets = new Set();
  let open = true;
  const track = (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => s.destroy());
  };
  const server = net.createServer((client) => {
    track(client);
    if (!open) {
      client.destroy();
      return;
    }
    const upstream = net.connect(port, host);
    track(upstream);
    client.pipe(upstream);
    upstream.pipe(client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${server.address().port}`,
    cut() {
      open = false;
      for (const s of sockets) s.destroy();
    },
    restore() {
      open = true;
    },
    close() {
      open = false;
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}
