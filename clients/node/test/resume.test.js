'use strict';
// resumingWatch against a scripted in-process hub (a grpc-js server with the
// same service definition): the reconnection, re-sync and give-up paths
// that a real hub produces only rarely (OUT_OF_RANGE for a running watch
// needs the API server to have compacted the token's version away; the
// real-hub suite provokes it only for a saved token, on a hub with a short
// history), and what every request of a watch asks for. These need no
// cluster.

const { describe, test, before, afterEach } = require('node:test');
const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');

const { connect, loadService, status } = require('../informerhub.js');
const { EventReader } = require('../testlib.js');

const selector = { version: 'v1', resource: 'configmaps', namespace: 'ns' };

/** A ConfigMap's JSON as the hub would send it. */
function cm(name, uid, rv, data) {
  return JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: 'ns', uid, resourceVersion: rv }, data });
}

function event(type, object, rv, token, initialEventsEnd = false, previousObject = '') {
  return { type: `EVENT_TYPE_${type}`, object, previousObject, resourceVersion: rv, resumeToken: token, initialEventsEnd };
}

/** A JSON value as the google.protobuf.Value proto-loader encodes. */
function toValue(v) {
  if (v === null) return { nullValue: 'NULL_VALUE' };
  if (Array.isArray(v)) return { listValue: { values: v.map(toValue) } };
  switch (typeof v) {
    case 'number': return { numberValue: v };
    case 'string': return { stringValue: v };
    case 'boolean': return { boolValue: v };
    default: return { structValue: toStruct(v) };
  }
}

/** A JSON object as a google.protobuf.Struct. */
function toStruct(object) {
  return { fields: Object.fromEntries(Object.entries(object).map(([k, v]) => [k, toValue(v)])) };
}

function failure(code, details, errorInfo) {
  const metadata = new grpc.Metadata();
  if (errorInfo) metadata.set('grpc-status-details-bin', statusDetails(code, details, errorInfo));
  return { code, details, metadata };
}

/** A google.rpc.Status with one google.rpc.ErrorInfo, encoded by hand. */
function statusDetails(code, message, { reason, domain, metadata }) {
  const varint = (n) => {
    const bytes = [];
    for (; n >= 0x80; n = Math.floor(n / 128)) bytes.push((n % 128) | 0x80);
    bytes.push(n);
    return Buffer.from(bytes);
  };
  const field = (no, value) => {
    const buf = Buffer.isBuffer(value) ? value : Buffer.from(value);
    return Buffer.concat([varint(no * 8 + 2), varint(buf.length), buf]);
  };
  const info = Buffer.concat([
    field(1, reason), field(2, domain),
    ...Object.entries(metadata).map(([k, v]) => field(3, Buffer.concat([field(1, k), field(2, v)]))),
  ]);
  const any = Buffer.concat([field(1, 'type.googleapis.com/google.rpc.ErrorInfo'), field(2, info)]);
  return Buffer.concat([varint(1 * 8), varint(code), field(2, message), field(3, any)]);
}

/**
 * A hub whose Watch answers each call with the next script: a function of
 * the call that writes events and ends it. requests holds every request.
 */
async function scriptedHub(scripts, options = {}) {
  const requests = [];
  const server = new grpc.Server();
  server.addService(loadService().service, {
    watch(call) {
      requests.push({ ...call.request, authorization: call.metadata.get('authorization')[0] });
      const script = scripts.shift();
      if (!script) {
        call.emit('error', failure(status.INTERNAL, 'no script left'));
        return;
      }
      script(call);
    },
    snapshot(call) {
      call.emit('error', failure(status.UNIMPLEMENTED, 'not scripted'));
    },
    listResources(_call, callback) {
      callback(failure(status.UNIMPLEMENTED, 'not scripted'));
    },
  });
  const port = await new Promise((resolve, reject) => {
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p)));
  });
  return {
    requests,
    client: connect(`127.0.0.1:${port}`, { token: 't0k3n', backoff: { initialMs: 1, maxMs: 5 }, ...options }),
    stop() {
      this.client.close();
      server.forceShutdown();
    },
  };
}

/**
 * Writes responses, then ends the call: with the status code end, cleanly
 * if end is 'OK', not at all if it is undefined.
 */
function send(responses, end, headers, errorInfo) {
  return (call) => {
    if (headers) {
      const md = new grpc.Metadata();
      for (const [k, v] of Object.entries(headers)) md.set(k, v);
      call.sendMetadata(md);
    }
    for (const r of responses) call.write(r);
    if (end === 'OK') call.end();
    else if (end !== undefined) call.emit('error', failure(end, `scripted ${status[end]}`, errorInfo));
  };
}

const typesAndNames = (events) => events.map((e) =>
  [e.type, e.object?.metadata.name, e.resync && 'resync', e.resyncReplaces && 'replaces'].filter(Boolean).join(' '));

async function read(watch, n) {
  const reader = new EventReader(watch, 10000);
  const events = [];
  try {
    for (let i = 0; i < n; i++) events.push(await reader.next(`event ${i + 1} of ${n}`));
  } finally {
    await reader.close();
  }
  return events;
}

describe('resumingWatch against a scripted hub', () => {
  let hub;
  afterEach(() => {
    hub?.stop();
    hub = null;
  });

  test('reconnects after UNAVAILABLE from the last token, and from the header token before any event', async () => {
    hub = await scriptedHub([
      send([], status.UNAVAILABLE, { 'resume-token': 'start' }), // fails before its first event
      send([event('ADDED', cm('a', 'u1', '1'), '1', 'tok1'), event('BOOKMARK', '', '1', 'tok2', true)], status.UNAVAILABLE),
      send([], 'OK'), // the hub ends the stream cleanly: retried as UNAVAILABLE
      send([event('MODIFIED', cm('a', 'u1', '2'), '2', 'tok3')]),
    ]);
    const retries = [];
    const watch = hub.client.resumingWatch(selector, { sendInitialEvents: true, onRetry: (err) => retries.push(err.code) });
    const events = await read(watch, 3);
    assert.deepEqual(typesAndNames(events), ['ADDED a', 'BOOKMARK', 'MODIFIED a']);
    assert.deepEqual(hub.requests.map((r) => [r.resumeToken, r.sendInitialEvents]), [
      ['', true], // as asked
      ['start', false], // the stream's start covers the initial events
      ['tok2', false],
      ['tok2', false],
    ]);
    assert.ok(hub.requests.every((r) => r.authorization === 'Bearer t0k3n'));
    assert.deepEqual(retries, [status.UNAVAILABLE, status.UNAVAILABLE, status.UNAVAILABLE]);
    assert.equal(watch.resumeToken, 'tok3');
  });

  test('re-syncs after OUT_OF_RANGE with the real differences', async () => {
    hub = await scriptedHub([
      send([
        event('ADDED', cm('a', 'u1', '1'), '1', 't1'),
        event('ADDED', cm('b', 'u2', '1'), '1', 't2'),
        event('ADDED', cm('d', 'u4', '1'), '1', 't3'),
        event('BOOKMARK', '', '1', 't4', true),
      ], status.OUT_OF_RANGE),
      // The re-list breaks halfway, and goes on from its last token.
      send([event('ADDED', cm('a', 'u1', '1'), '9', 'r1')], status.UNAVAILABLE),
      send([
        event('ADDED', cm('b', 'u2', '5'), '9', 'r2'),
        event('ADDED', cm('c', 'u3', '6'), '9', 'r3'),
        event('ADDED', cm('d', 'u5', '7'), '9', 'r4'), // deleted and created again
        event('BOOKMARK', '', '9', 'r5', true),
        event('DELETED', cm('c', 'u3', '10'), '10', 't10'),
      ]),
    ]);
    const watch = hub.client.resumingWatch(selector, { sendInitialEvents: true });
    const events = await read(watch, 4 + 5 + 1);
    assert.deepEqual(typesAndNames(events), [
      'ADDED a', 'ADDED b', 'ADDED d', 'BOOKMARK',
      'DELETED d resync', 'MODIFIED b resync', 'ADDED c resync', 'ADDED d resync', 'BOOKMARK resync',
      'DELETED c',
    ]);
    assert.equal(events[4].object.metadata.uid, 'u4'); // the identity that vanished
    assert.equal(events[4].resourceVersion, '9'); // the listing's
    assert.deepEqual(events.slice(4, 8).map((e) => e.resumeToken), ['t4', 't4', 't4', 't4']); // still before the re-sync
    assert.equal(events[8].resumeToken, 'r5');
    assert.equal(events[8].initialEventsEnd, false);
    assert.deepEqual(hub.requests.map((r) => [r.resumeToken, r.sendInitialEvents]), [['', true], ['', true], ['r1', false]]);
  });

  test('a watch from a saved token re-syncs by listing everything, marked resyncReplaces', async () => {
    hub = await scriptedHub([
      send([], status.OUT_OF_RANGE),
      send([event('ADDED', cm('b', 'u2', '5'), '9', 'r1'), event('ADDED', cm('a', 'u1', '4'), '9', 'r2'), event('BOOKMARK', '', '9', 'r3', true)]),
    ]);
    const watch = hub.client.resumingWatch(selector, { resumeToken: 'saved' });
    const events = await read(watch, 3);
    assert.deepEqual(typesAndNames(events), ['ADDED a resync replaces', 'ADDED b resync replaces', 'BOOKMARK resync replaces']);
    assert.deepEqual(hub.requests.map((r) => [r.resumeToken, r.sendInitialEvents]), [['saved', false], ['', true]]);
  });

  for (const code of [status.INVALID_ARGUMENT, status.NOT_FOUND, status.PERMISSION_DENIED, status.UNAUTHENTICATED]) {
    test(`ends with ${status[code]}, without retrying`, async () => {
      hub = await scriptedHub([send([event('BOOKMARK', '', '1', 't1')], code)]);
      const retries = [];
      const reader = new EventReader(hub.client.resumingWatch(selector, { onRetry: (err) => retries.push(err) }), 10000);
      try {
        assert.equal((await reader.next()).type, 'BOOKMARK');
        await assert.rejects(reader.next(), (err) => err.code === code);
      } finally {
        await reader.close();
      }
      assert.deepEqual(retries, []);
      assert.equal(hub.requests.length, 1);
      });
  }

  test('reconnects with fresh credentials when a running stream\'s expire', async () => {
    const tokens = ['first', 'second'];
    hub = await scriptedHub([
      send([event('BOOKMARK', '', '1', 't1')], status.UNAUTHENTICATED, undefined,
        { reason: 'UNAUTHENTICATED', domain: 'informerhub.io', metadata: { resume_token: 't1' } }),
      send([event('ADDED', cm('a', 'u1', '2'), '2', 't2')]),
    ], { token: async () => tokens.shift() });
    const retries = [];
    const events = await read(hub.client.resumingWatch(selector, { onRetry: (err) => retries.push(err) }), 2);
    assert.deepEqual(typesAndNames(events), ['BOOKMARK', 'ADDED a']);
    assert.deepEqual(hub.requests.map((r) => [r.resumeToken, r.authorization]), [['', 'Bearer first'], ['t1', 'Bearer second']]);
    assert.deepEqual(retries.map((e) => [e.code, e.reason, e.errorInfo.metadata.resume_token]), [[status.UNAUTHENTICATED, 'UNAUTHENTICATED', 't1']]);
  });

  test('every call, re-syncs included, asks for the same filter, shard, fields, includePrevious and objectFormat', async () => {
    hub = await scriptedHub([
      send([event('ADDED', cm('a', 'u1', '1'), '1', 't1'), event('BOOKMARK', '', '1', 't2', true)], status.UNAVAILABLE),
      send([], status.OUT_OF_RANGE),
      send([event('ADDED', cm('a', 'u1', '1'), '9', 'r1'), event('BOOKMARK', '', '9', 'r2', true)]),
    ]);
    const shardSelector = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";
    const filtered = { ...selector, labelSelector: 'app=web', fieldSelector: 'metadata.name!=b', filter: 'has(object.data)', shardSelector };
    const watch = hub.client.resumingWatch(filtered, {
      sendInitialEvents: true, fields: ['data', 'metadata.labels'], includePrevious: true, objectFormat: 'struct',
    });
    await read(watch, 3);
    assert.equal(hub.requests.length, 3);
    for (const r of hub.requests) {
      assert.deepEqual(r.selector, {
        group: '', version: 'v1', resource: 'configmaps', namespace: 'ns',
        labelSelector: 'app=web', fieldSelector: 'metadata.name!=b', filter: 'has(object.data)', shardSelector,
      });
      assert.deepEqual([r.fields, r.includePrevious, r.objectFormat], [['data', 'metadata.labels'], true, 'OBJECT_FORMAT_STRUCT']);
    }
    assert.deepEqual(hub.requests.map((r) => [r.resumeToken, r.sendInitialEvents]), [['', true], ['t2', false], ['', true]]);
  });

  test('with fields, a re-sync yields MODIFIED only where the fields changed, with previousObject', async () => {
    hub = await scriptedHub([
      send([
        event('ADDED', cm('a', 'u1', '1', { x: '1' }), '1', 't1'),
        event('ADDED', cm('b', 'u2', '1', { x: '1' }), '1', 't2'),
        event('BOOKMARK', '', '1', 't3', true),
        event('MODIFIED', cm('b', 'u2', '2', { x: '2' }), '2', 't4', false, cm('b', 'u2', '1', { x: '1' })),
      ], status.OUT_OF_RANGE),
      send([
        // a changed in fields it did not ask for: a new resourceVersion, the same projection.
        event('ADDED', cm('a', 'u1', '5', { x: '1' }), '9', 'r1'),
        event('ADDED', cm('b', 'u2', '6', { x: '3' }), '9', 'r2'),
        event('BOOKMARK', '', '9', 'r3', true),
      ]),
    ]);
    const watch = hub.client.resumingWatch(selector, { sendInitialEvents: true, fields: ['data.x'], includePrevious: true });
    const events = await read(watch, 4 + 2);
    assert.deepEqual(typesAndNames(events), ['ADDED a', 'ADDED b', 'BOOKMARK', 'MODIFIED b', 'MODIFIED b resync', 'BOOKMARK resync']);
    assert.deepEqual(events[3].previousObject.data, { x: '1' });
    const resynced = events[4];
    assert.deepEqual([resynced.object.data, resynced.resourceVersion], [{ x: '3' }, '6']);
    // What the watch had yielded last: the state before the re-sync.
    assert.deepEqual([resynced.previousObject.data, resynced.previousObject.metadata.resourceVersion], [{ x: '2' }, '2']);
  });

  test('without includePrevious or fields, a re-sync\'s MODIFIED has no previousObject, and a new resourceVersion is a change', async () => {
    hub = await scriptedHub([
      send([event('ADDED', cm('a', 'u1', '1', { x: '1' }), '1', 't1'), event('BOOKMARK', '', '1', 't2', true)], status.OUT_OF_RANGE),
      send([event('ADDED', cm('a', 'u1', '5', { x: '1' }), '9', 'r1'), event('BOOKMARK', '', '9', 'r2', true)]),
    ]);
    const events = await read(hub.client.resumingWatch(selector, { sendInitialEvents: true }), 2 + 2);
    assert.deepEqual(typesAndNames(events), ['ADDED a', 'BOOKMARK', 'MODIFIED a resync', 'BOOKMARK resync']);
    assert.equal(events[2].previousObject, null);
  });

  test('objects sent as Structs are delivered as the plain objects JSON.parse gives', async () => {
    // ConfigMap data may have a key "__proto__": JSON.parse makes it an own
    // property like any other.
    const json = JSON.stringify({
      apiVersion: 'v1', kind: 'ConfigMap',
      metadata: { name: 'a', namespace: 'ns', uid: 'u1', resourceVersion: '2', labels: { app: 'web' } },
      data: { PROTO: 'a key like any other', empty: '' },
      spec: { replicas: 3, ratio: 0.5, paused: false, none: null, ports: [80, { name: 'http' }], nested: [[]] },
    }).replace('"PROTO"', '"__proto__"');
    const before = { ...JSON.parse(json), data: { v: 'old' } };
    hub = await scriptedHub([send([{
      type: 'EVENT_TYPE_MODIFIED', objectStruct: toStruct(JSON.parse(json)), previousObjectStruct: toStruct(before),
      resourceVersion: '2', resumeToken: 't1',
    }])]);
    const [e] = await read(hub.client.watch(selector, { objectFormat: 'struct', includePrevious: true }), 1);
    assert.deepStrictEqual(e.object, JSON.parse(json));
    assert.ok(Object.hasOwn(e.object.data, '__proto__'));
    assert.equal(Object.getPrototypeOf(e.object.data), Object.prototype);
    assert.deepStrictEqual(e.previousObject, before);
    assert.deepEqual(hub.requests.map((r) => [r.objectFormat, r.includePrevious]), [['OBJECT_FORMAT_STRUCT', true]]);
  });

  test('options are checked before any call', () => {
    const client = connect('127.0.0.1:1');
    try {
      assert.throws(() => client.watch(selector, { objectFormat: 'yaml' }), /objectFormat is "json" or "struct", not "yaml"/);
      assert.throws(() => client.resumingWatch(selector, { fields: 'status.phase' }), /fields is a list of paths/);
      assert.throws(() => client.watch(selector, { includePrevius: true }), /watch has no option includePrevius/);
    } finally {
      client.close();
    }
  });

  test('cancel() ends the iteration', async () => {
    hub = await scriptedHub([send([event('BOOKMARK', '', '1', 't1')])]);
    const watch = hub.client.resumingWatch(selector);
    const seen = [];
    for await (const e of watch) {
      seen.push(e.type);
      watch.cancel();
    }
    assert.deepEqual(seen, ['BOOKMARK']);
  });
});

before(() => {
  // Keep grpc-js from logging the scripted failures.
  grpc.setLogVerbosity(grpc.logVerbosity.NONE);
});
