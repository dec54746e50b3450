'use strict';
// A small Node.js client of informerhub: watches that resume exactly (with
// filters, projections and previous states), snapshots, digests that check
// what a client holds, and the list of watchable resources. It loads the service definition from the
// repository's proto/ at run time; nothing is generated.
//
//   const hub = connect('127.0.0.1:8080', { token: 'eyJ…' });
//   for await (const e of hub.resumingWatch({ version: 'v1', resource: 'configmaps', namespace: 'demo' },
//                                           { sendInitialEvents: true })) {
//     console.log(e.type, e.object?.metadata.name, e.resumeToken);
//   }

const crypto = require('node:crypto');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_DIR = path.join(__dirname, '..', '..', 'proto');
const PROTO_FILE = 'informerhub/v1/informerhub.proto';

/**
 * How the hub sends objects (WatchRequest.object_format): as JSON strings,
 * the API server's own bytes (the default), or as google.protobuf.Struct.
 * Either way the client delivers plain objects; see README.
 */
const ObjectFormat = Object.freeze({ JSON: 'json', STRUCT: 'struct' });

const OBJECT_FORMATS = {
  [ObjectFormat.JSON]: 'OBJECT_FORMAT_UNSPECIFIED',
  [ObjectFormat.STRUCT]: 'OBJECT_FORMAT_STRUCT',
};

const EVENT_TYPES = {
  EVENT_TYPE_ADDED: 'ADDED',
  EVENT_TYPE_MODIFIED: 'MODIFIED',
  EVENT_TYPE_DELETED: 'DELETED',
  EVENT_TYPE_BOOKMARK: 'BOOKMARK',
};

// Errors that retrying cannot fix: a watch ends with them.
const FATAL = new Set([
  grpc.status.INVALID_ARGUMENT,
  grpc.status.NOT_FOUND,
  grpc.status.PERMISSION_DENIED,
  grpc.status.UNAUTHENTICATED,
  grpc.status.UNIMPLEMENTED,
]);

// Objects are at most 1.5 MiB in etcd and snapshot pages about 1 MiB: never
// refuse what a hub sends.
const MAX_RECEIVE_BYTES = 64 << 20;

/**
 * Loads the service from the .proto files under protoDir (the repository's
 * proto/ by default). Field names are camelCase (resumeToken), enums
 * strings; a oneof's member is named by its virtual field (a
 * google.protobuf.Value's kind).
 */
function loadService(protoDir = PROTO_DIR) {
  const definition = protoLoader.loadSync(PROTO_FILE, {
    includeDirs: [protoDir],
    keepCase: false,
    enums: String,
    longs: Number,
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(definition).informerhub.v1.InformerHubService;
}

/** Tells whether address (host:port) is on this machine. */
function isLoopback(address) {
  if (address.startsWith('unix:')) return true;
  const match = /^(?:dns:\/\/\/)?(?:\[([^\]]+)\]|([^:]+)):\d+$/.exec(address);
  if (!match) return false;
  const host = match[1] ?? match[2];
  if (host === 'localhost') return true;
  if (net.isIPv4(host)) return host.startsWith('127.');
  return host === '::1';
}

/**
 * Returns a Client for the hub at address (host:port).
 *
 * options:
 *   token       a bearer token, or a function (possibly async) returning one,
 *               called before every call; sent as "authorization: Bearer <token>"
 *   tokenFile   a file holding the token, re-read for every call (projected
 *               service account tokens rotate)
 *   caFile      verify the hub's TLS certificate with this CA (PEM)
 *   insecure    plaintext. Default: plaintext to a loopback address without
 *               caFile, TLS otherwise. Bearer tokens go in plaintext only to
 *               loopback, unless allowTokensWithoutTLS.
 *   protoDir    where informerhub/v1/informerhub.proto is
 *   backoff     { initialMs: 100, maxMs: 30000, multiplier: 2, jitter: 0.2 } for resumingWatch
 */
function connect(address, options = {}) {
  return new Client(address, options);
}

class Client {
  constructor(address, options = {}) {
    if (!address) throw new Error('informerhub: no address');
    const { token, tokenFile, caFile, allowTokensWithoutTLS = false, protoDir, backoff = {} } = options;
    if (token !== undefined && tokenFile !== undefined) throw new Error('informerhub: give token or tokenFile, not both');
    const insecure = options.insecure ?? (caFile === undefined && isLoopback(address));
    if (insecure && caFile !== undefined) throw new Error('informerhub: insecure and caFile contradict each other');
    if (tokenFile !== undefined) {
      this.tokenSource = async () => (await fs.promises.readFile(tokenFile, 'utf8')).trim();
    } else if (typeof token === 'function') {
      this.tokenSource = token;
    } else if (token !== undefined) {
      this.tokenSource = () => token;
    }
    if (this.tokenSource && insecure && !allowTokensWithoutTLS && !isLoopback(address)) {
      throw new Error(`informerhub: a bearer token would cross the network to ${address} in the clear: use TLS (or allowTokensWithoutTLS)`);
    }
    const credentials = insecure
      ? grpc.credentials.createInsecure()
      : grpc.credentials.createSsl(caFile === undefined ? null : fs.readFileSync(caFile));
    const Service = loadService(protoDir);
    this.address = address;
    this.backoff = { initialMs: 100, maxMs: 30000, multiplier: 2, jitter: 0.2, ...backoff };
    this.stub = new Service(address, credentials, {
      // Notice a hub that died without closing the connection: a watch only
      // reads, so without pings it would wait forever. The hub allows pings
      // every 10s.
      'grpc.keepalive_time_ms': 30000,
      'grpc.keepalive_timeout_ms': 10000,
      'grpc.max_receive_message_length': MAX_RECEIVE_BYTES,
    });
  }

  /** Closes the connection; calls in progress end. */
  close() {
    this.stub.close();
  }

  /** The metadata of one call: the bearer token, if any. */
  async metadata() {
    const md = new grpc.Metadata();
    if (this.tokenSource) {
      let token;
      try {
        token = await this.tokenSource();
      } catch (err) {
        // Worth retrying: a token file in the middle of its rotation.
        throw statusError(grpc.status.UNAVAILABLE, `informerhub: getting the bearer token: ${err.message}`);
      }
      md.set('authorization', `Bearer ${token}`);
    }
    return md;
  }

  /**
   * The resource types the caller may list and watch in namespace (or
   * cluster-wide, with ''): [{group, version, resource, kind, namespaced,
   * selectableFields, informerActive, subscribers, cachedObjects, ...}].
   * selectableFields are the fields a fieldSelector may name.
   */
  async listResources(namespace = '') {
    const md = await this.metadata();
    return new Promise((resolve, reject) => {
      this.stub.listResources({ namespace }, md, (err, resp) => {
        if (err) reject(withDetails(err));
        else resolve(resp.resources);
      });
    });
  }

  /**
   * Every object matching selector at one point in time, all pages read:
   * { objects (plain objects, by namespace and name), filterErrors (parallel
   * to objects: why the filter could not decide on each, '' where it did;
   * empty when it decided on every one), resumeToken, resourceVersion }.
   * A watch from resumeToken delivers exactly the changes after the snapshot.
   * Options: fields (projection paths) and objectFormat, as for watch.
   */
  async snapshot(selector, { fields = [], objectFormat = ObjectFormat.JSON, signal, ...unknown } = {}) {
    rejectUnknown(unknown, 'snapshot');
    const request = {
      selector: selectorProto(selector),
      fields: fieldsProto(fields),
      objectFormat: objectFormatProto(objectFormat),
    };
    const stream = openStream(this.stub.snapshot(request, await this.metadata()), signal);
    try {
      const snap = { objects: [], filterErrors: [], resumeToken: '', resourceVersion: '' };
      for (;;) {
        const page = await stream.next();
        if (page === null) throw statusError(grpc.status.UNAVAILABLE, 'informerhub: the snapshot ended before its last page');
        // A page holds JSON strings or Structs, as asked.
        const before = snap.objects.length;
        for (const o of page.objects) snap.objects.push(JSON.parse(o));
        for (const s of page.objectStructs) snap.objects.push(structToObject(s));
        if (page.filterErrors.length > 0 || snap.filterErrors.length > 0) {
          while (snap.filterErrors.length < before) snap.filterErrors.push('');
          if (page.filterErrors.length > 0) snap.filterErrors.push(...page.filterErrors);
          else while (snap.filterErrors.length < snap.objects.length) snap.filterErrors.push('');
        }
        snap.resumeToken = page.resumeToken;
        snap.resourceVersion = page.resourceVersion;
        if (page.last) return snap;
      }
    } finally {
      stream.cancel();
    }
  }

  /**
   * One Watch stream, as the hub sends it: iterate it with for await. It
   * ends when the hub ends the stream, throws its gRPC error (err.code,
   * err.reason), and stops on cancel() or signal. No reconnection: see
   * resumingWatch.
   *
   * options:
   *   resumeToken        continue right after the event that carried it
   *   sendInitialEvents  every matching object as ADDED first, then a BOOKMARK
   *   fields             projection: the paths to keep (['status.phase', 'metadata.labels']);
   *                      a MODIFIED that changes none of them is not sent
   *   includePrevious    MODIFIED events carry previousObject, the state before the change
   *   objectFormat       ObjectFormat.JSON (default) or ObjectFormat.STRUCT
   *   signal             an AbortSignal that cancels the watch
   */
  watch(selector, { resumeToken = '', sendInitialEvents = false, signal, ...view } = {}) {
    return new Watch(this, selector, { resumeToken, sendInitialEvents, signal, view: viewProto(view) });
  }

  /**
   * A watch without gaps: on a disconnect that retrying can fix it
   * reconnects, with exponential backoff and jitter, from the token of the
   * last event it yielded (before the first, from the token of the stream's
   * start, which the hub sends in its headers). When the hub can no longer
   * resume (OUT_OF_RANGE), it lists again and yields the differences from
   * what it had yielded, marked resync (see README). It throws the errors
   * that retrying cannot fix: INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED,
   * UNAUTHENTICATED (except a running stream whose credentials expired: it
   * reconnects with the token source's current ones) and UNIMPLEMENTED.
   * Every reconnection and re-sync asks for the same selector (filter
   * included), fields, includePrevious and objectFormat. Options are
   * watch's, and onRetry(err, failures), called before each reconnection.
   */
  resumingWatch(selector, { resumeToken = '', sendInitialEvents = false, signal, onRetry, ...view } = {}) {
    return new ResumingWatch(this, selector, { resumeToken, sendInitialEvents, signal, onRetry, view: viewProto(view) });
  }

  /**
   * Several watches on one stream (WatchMany). watches is a list of
   * { selector, resumeToken, sendInitialEvents, fields, includePrevious,
   * objectFormat }, each as watch takes it. Iterate the result for
   * { index, event, resumeToken, initialEventsEnd }: event as watch yields
   * it, of the watch at index; resumeToken resumes every watch right after
   * it (give it as watchMany's resumeToken, with the same watches, or some
   * dropped, added or changed: the others resume); initialEventsEnd on the
   * event that ends the last watch's initial events. A watch's own
   * resumeToken wins over the shared one. cancel() ends it; the iteration
   * throws the status that ends the stream, whose ErrorInfo metadata
   * "index" names the watch it concerns.
   */
  watchMany(watches, { resumeToken = '', signal } = {}) {
    const request = {
      resumeToken,
      watches: watches.map(({ selector, resumeToken: own = '', sendInitialEvents = false, ...view }) => (
        { selector: selectorProto(selector), resumeToken: own, sendInitialEvents, ...viewProto(view) })),
    };
    return new Stream(this, 'watchMany', request, signal, (resp) => ({
      index: resp.index,
      event: eventOf(resp.event),
      resumeToken: resp.resumeToken,
      initialEventsEnd: resp.initialEventsEnd,
    }));
  }

  /**
   * Live counts (Count) of the objects selector selects, grouped by
   * groupBy: '' (the total only), 'namespace', 'label:<key>', or a path
   * such as 'status.phase'. Iterate the result for { groups, total,
   * resourceVersion }: the current counts first, then new ones whenever
   * they change (at most once per the hub's --count-interval); groups maps
   * each group value ('' for objects without one) to its count. cancel()
   * ends it.
   */
  count(selector, { groupBy = '', signal } = {}) {
    return new Stream(this, 'count', { selector: selectorProto(selector), groupBy }, signal, (resp) => ({
      groups: { ...resp.groups },
      total: resp.total,
      resourceVersion: resp.resourceVersion,
    }));
  }

  /**
   * The hub's digest of what selector selects at resumeToken (an event's or
   * a snapshot's token of this selector; '' for now): { count, digest,
   * resourceVersion, resumeToken, moved }. Compare it with a Digest of what
   * you hold at that token (digest.matches(answer)). moved: the token was
   * older than the hub's history, so the answer is of the position at its
   * resumeToken instead; catch up to that token, then compare.
   */
  async digest(selector, { resumeToken = '', signal, ...unknown } = {}) {
    rejectUnknown(unknown, 'digest');
    const request = { selector: selectorProto(selector), resumeToken };
    const md = await this.metadata();
    return new Promise((resolve, reject) => {
      const call = this.stub.digest(request, md, (err, resp) => {
        signal?.removeEventListener('abort', cancel);
        if (err) reject(withDetails(err));
        else resolve({ count: resp.count, digest: resp.digest, resourceVersion: resp.resourceVersion, resumeToken: resp.resumeToken, moved: resp.moved });
      });
      const cancel = () => call.cancel();
      signal?.addEventListener('abort', cancel, { once: true });
      if (signal?.aborted) cancel();
    });
  }

  /** Opens a Watch call and returns its stream reader. */
  async openWatch(selector, request, signal, onHeaders) {
    const call = this.stub.watch({ selector: selectorProto(selector), ...request }, await this.metadata());
    call.on('metadata', (md) => onHeaders?.(md.get('resume-token')[0] ?? ''));
    return openStream(call, signal);
  }
}

function selectorProto(selector) {
  if (!selector || !selector.version || !selector.resource) {
    throw new TypeError('informerhub: a selector needs version and resource, e.g. { version: "v1", resource: "configmaps" }');
  }
  const { group = '', version, resource, namespace = '', labelSelector = '', fieldSelector = '', filter = '', shardSelector = '' } = selector;
  return { group, version, resource, namespace, labelSelector, fieldSelector, filter, shardSelector };
}

function fieldsProto(fields) {
  if (!Array.isArray(fields) || !fields.every((f) => typeof f === 'string')) {
    throw new TypeError('informerhub: fields is a list of paths, e.g. ["status.phase", "metadata.labels"]');
  }
  return [...fields];
}

function objectFormatProto(format) {
  const proto = Object.hasOwn(OBJECT_FORMATS, format) ? OBJECT_FORMATS[format] : undefined;
  if (proto === undefined) {
    const known = Object.values(ObjectFormat).map((f) => JSON.stringify(f)).join(' or ');
    throw new TypeError(`informerhub: objectFormat is ${known}, not ${JSON.stringify(format)}`);
  }
  return proto;
}

/** Throws for options a call does not know: a misspelt one would otherwise go unnoticed. */
function rejectUnknown(options, call) {
  const names = Object.keys(options);
  if (names.length > 0) throw new TypeError(`informerhub: ${call} has no option ${names.join(', ')}`);
}

/** The fields of a WatchRequest that say what form events take. */
function viewProto({ fields = [], includePrevious = false, objectFormat = ObjectFormat.JSON, ...unknown }) {
  rejectUnknown(unknown, 'watch');
  return { fields: fieldsProto(fields), includePrevious: Boolean(includePrevious), objectFormat: objectFormatProto(objectFormat) };
}

/** An object of a response: from its Struct if the hub sent one, else its JSON; null if neither. */
function objectOf(json, struct) {
  if (struct) return structToObject(struct);
  return json === '' ? null : JSON.parse(json);
}

function eventOf(resp) {
  return {
    type: EVENT_TYPES[resp.type] ?? resp.type,
    object: objectOf(resp.object, resp.objectStruct),
    previousObject: objectOf(resp.previousObject, resp.previousObjectStruct),
    resourceVersion: resp.resourceVersion,
    resumeToken: resp.resumeToken,
    initialEventsEnd: resp.initialEventsEnd,
    // A difference a relist found: what happened in between is unknown.
    fromRelist: resp.fromRelist,
    // Why the filter could not decide on the object (a failed or too costly
    // evaluation); the event is delivered as if it matched. '' otherwise.
    filterError: resp.filterError,
  };
}

/**
 * A google.protobuf.Struct as decoded by proto-loader ({fields: {name:
 * Value}}) as the plain object JSON.parse would give for its JSON.
 */
function structToObject(struct) {
  const object = {};
  for (const [key, value] of Object.entries(struct.fields ?? {})) {
    // As JSON.parse does, "__proto__" is a key like any other (ConfigMap
    // data may hold one), not the object's prototype.
    Object.defineProperty(object, key, { value: valueToJS(value), enumerable: true, writable: true, configurable: true });
  }
  return object;
}

function valueToJS(value) {
  switch (value.kind) {
    case 'nullValue':
      return null;
    case 'numberValue':
      return value.numberValue;
    case 'stringValue':
      return value.stringValue;
    case 'boolValue':
      return value.boolValue;
    case 'structValue':
      return structToObject(value.structValue);
    case 'listValue':
      return (value.listValue.values ?? []).map(valueToJS);
    default:
      // An unset Value; JSON has no such thing.
      return null;
  }
}

/**
 * Reads a server stream message by message, with backpressure (the call is
 * paused while messages wait). next() returns the next message, null at a
 * clean end, or throws the call's error once the messages before it are read.
 */
function openStream(call, signal) {
  const queue = [];
  let ended = false;
  let error = null;
  let wake = null;
  const notify = () => wake?.();
  call.on('data', (msg) => {
    queue.push(msg);
    if (queue.length >= 16) call.pause();
    notify();
  });
  // gRPC emits 'error' right after the last message was queued inside the
  // stream, and 'end' once they were all read: end there.
  call.on('error', (err) => {
    error = withDetails(err);
    notify();
  });
  call.on('end', () => {
    ended = true;
    notify();
  });
  const onAbort = () => call.cancel();
  signal?.addEventListener('abort', onAbort, { once: true });
  if (signal?.aborted) call.cancel();
  return {
    async next() {
      for (;;) {
        // A call cancelled by its signal yields nothing more.
        if (signal?.aborted) throw abortError(signal);
        if (queue.length > 0) {
          const msg = queue.shift();
          if (queue.length < 4 && call.isPaused()) call.resume();
          return msg;
        }
        if (ended) {
          signal?.removeEventListener('abort', onAbort);
          if (error) throw error;
          return null;
        }
        await new Promise((resolve) => {
          const stop = () => {
            signal?.removeEventListener('abort', stop);
            wake = null;
            resolve();
          };
          wake = stop;
          signal?.addEventListener('abort', stop, { once: true });
        });
      }
    },
    cancel() {
      signal?.removeEventListener('abort', onAbort);
      call.cancel();
    },
  };
}

/** One Watch call; see Client.watch. */
class Watch {
  constructor(client, selector, { resumeToken, sendInitialEvents, signal, view }) {
    this.client = client;
    this.selector = selector;
    this.request = { resumeToken, sendInitialEvents, ...view };
    this.controller = new AbortController();
    this.signal = signal ? AbortSignal.any([signal, this.controller.signal]) : this.controller.signal;
    /** The token of the last event yielded, or of the stream's start, or the one given. */
    this.resumeToken = resumeToken;
  }

  /** Ends the watch: the call is cancelled and iteration stops. */
  cancel() {
    this.controller.abort();
  }

  async *[Symbol.asyncIterator]() {
    let gotEvent = false;
    const stream = await this.client.openWatch(this.selector, this.request, this.signal, (token) => {
      if (token && !gotEvent) this.resumeToken = token;
    });
    for await (const resp of responses(stream, this.signal)) {
      gotEvent = true;
      const event = eventOf(resp);
      this.resumeToken = event.resumeToken;
      yield event;
    }
  }
}

/**
 * The responses of a stream reader (openStream) until the stream ends;
 * nothing more, and no error, once signal aborted it. The call is cancelled
 * when the iteration stops.
 */
async function* responses(stream, signal) {
  try {
    for (;;) {
      let resp;
      try {
        resp = await stream.next();
      } catch (err) {
        if (signal.aborted) return;
        throw err;
      }
      if (resp === null) return;
      yield resp;
    }
  } finally {
    stream.cancel();
  }
}

/**
 * A server stream of the service other than Watch (WatchMany, Count),
 * iterated as its responses converted by convert. It does not reconnect.
 */
class Stream {
  constructor(client, method, request, signal, convert) {
    this.client = client;
    this.method = method;
    this.request = request;
    this.convert = convert;
    this.controller = new AbortController();
    this.signal = signal ? AbortSignal.any([signal, this.controller.signal]) : this.controller.signal;
  }

  /** Ends the stream: the call is cancelled and iteration stops. */
  cancel() {
    this.controller.abort();
  }

  async *[Symbol.asyncIterator]() {
    const call = this.client.stub[this.method](this.request, await this.client.metadata());
    for await (const resp of responses(openStream(call, this.signal), this.signal)) {
      yield this.convert(resp);
    }
  }
}

/** A watch that reconnects and resumes; see Client.resumingWatch. */
class ResumingWatch {
  constructor(client, selector, { resumeToken, sendInitialEvents, signal, onRetry, view }) {
    this.client = client;
    this.selector = selector;
    this.view = view; // fields, includePrevious, objectFormat: the same on every call
    this.sendInitialEvents = sendInitialEvents;
    this.onRetry = onRetry;
    this.controller = new AbortController();
    this.signal = signal ? AbortSignal.any([signal, this.controller.signal]) : this.controller.signal;
    /** The token of the last event yielded (or the watch's start): a new watch from it continues exactly here. */
    this.resumeToken = resumeToken;
    this.tokenFromHub = false; // the token came from the hub, so it covers sendInitialEvents
    this.initialPending = sendInitialEvents; // initial events asked for and not ended
    this.failures = 0; // consecutive failed attempts, for the backoff
    // What the watch has yielded: every object that exists for the caller,
    // by namespace/name, as {id, object}. Re-syncs diff against it if it is
    // all the caller holds (knowsAll): not so for a watch that started from
    // a token. The object itself is kept only when a re-sync needs it: to
    // compare projections (fields), or to be a MODIFIED's previousObject.
    this.seen = new Map();
    this.keepObjects = view.fields.length > 0 || view.includePrevious;
    this.knowsAll = resumeToken === '';
    this.resync = null; // during a re-sync: the objects listed so far
    this.resyncToken = ''; // and where to go on listing if its stream breaks
    this.pending = []; // events a re-sync computed, not yet yielded
  }

  /** Ends the watch: the call is cancelled and iteration stops. */
  cancel() {
    this.controller.abort();
  }

  async *[Symbol.asyncIterator]() {
    let stream = null;
    try {
      for (;;) {
        if (this.signal.aborted) return;
        if (this.pending.length > 0) {
          const event = this.pending.shift();
          this.deliver(event);
          yield event;
          continue;
        }
        if (stream === null) {
          try {
            stream = await this.connect();
          } catch (err) {
            await this.failed(err);
          }
          continue;
        }
        let resp;
        try {
          resp = await stream.next();
          if (resp === null) throw statusError(grpc.status.UNAVAILABLE, 'informerhub: the hub ended the stream');
        } catch (err) {
          stream.cancel();
          stream = null;
          await this.failed(err);
          continue;
        }
        this.failures = 0;
        const event = eventOf(resp);
        if (this.resync !== null) {
          this.collect(event);
          continue;
        }
        this.deliver(event);
        yield event;
      }
    } finally {
      stream?.cancel();
    }
  }

  /** Opens a stream from where the watch is, after the backoff its failures call for. */
  async connect() {
    if (this.failures > 0) {
      const b = this.client.backoff;
      let delay = Math.min(b.initialMs * b.multiplier ** (this.failures - 1), b.maxMs);
      delay *= 1 + b.jitter * (2 * Math.random() - 1);
      await sleep(delay, this.signal);
    }
    const request = { resumeToken: this.resumeToken, sendInitialEvents: false, ...this.view };
    if (this.resync !== null) {
      // List again, or go on listing from where the last stream broke.
      request.resumeToken = this.resyncToken;
      request.sendInitialEvents = this.resyncToken === '';
    } else if (!this.tokenFromHub) {
      // Until the hub has issued a token, ask for what the caller asked; the
      // hub's tokens carry the initial events' progress themselves.
      request.sendInitialEvents = this.sendInitialEvents;
    }
    const fromHeaders = !this.tokenFromHub && this.resync === null;
    return this.client.openWatch(this.selector, request, this.signal, (token) => {
      // The token of the stream's start, so that a reconnection before the
      // first event loses nothing. Headers come before any message.
      if (fromHeaders && token && !this.tokenFromHub) {
        this.resumeToken = token;
        this.tokenFromHub = true;
      }
    });
  }

  /** Decides what an error means for the watch: throws if it ends it. */
  async failed(err) {
    if (this.signal.aborted) return;
    switch (err.code) {
      case grpc.status.OUT_OF_RANGE:
        // The token expired: list again and yield the differences.
        this.resync = new Map();
        this.resyncToken = '';
        this.failures = 0;
        break;
      case grpc.status.UNAUTHENTICATED:
        // The credentials that opened a running stream expired: reconnect
        // with the token source's current ones; if those are refused, end.
        if (!err.errorInfo?.metadata.resume_token) throw err;
        break;
      case grpc.status.RESOURCE_EXHAUSTED:
        this.failures++;
        break;
      default:
        if (FATAL.has(err.code) || err.code === undefined) throw err;
        this.failures++;
    }
    this.onRetry?.(err, this.failures);
  }

  /** Records event as yielded to the caller. */
  deliver(event) {
    if (event.resumeToken) {
      this.resumeToken = event.resumeToken;
      this.tokenFromHub = true;
    }
    if (event.initialEventsEnd) this.initialPending = false;
    const id = identityOf(event.object);
    if (id === null) return;
    if (event.type === 'DELETED') this.seen.delete(keyOf(id));
    else this.seen.set(keyOf(id), { id, object: this.keepObjects ? event.object : null });
  }

  /** Gathers a re-sync's objects; at their end, computes the differences. */
  collect(event) {
    if (event.type === 'ADDED' && event.object !== null) {
      const id = identityOf(event.object);
      if (id !== null) this.resync.set(keyOf(id), { id, object: event.object });
      this.resyncToken = event.resumeToken;
      return;
    }
    if (!event.initialEventsEnd) return;
    // Until the re-sync is complete, its events carry the last token from
    // before it: a caller that stops halfway re-syncs again.
    const before = this.resumeToken;
    const replaces = !this.knowsAll;
    const mark = (type, object, resourceVersion, previousObject = null) => ({
      type, object, previousObject, resourceVersion, resumeToken: before, initialEventsEnd: false, resync: true, resyncReplaces: replaces,
    });
    const diff = [];
    if (replaces) {
      // What the caller holds is unknown: list it all.
      for (const key of [...this.resync.keys()].sort()) {
        const now = this.resync.get(key);
        diff.push(mark('ADDED', now.object, now.id.metadata.resourceVersion));
      }
      this.seen.clear();
    } else {
      for (const key of [...this.seen.keys()].sort()) {
        const old = this.seen.get(key);
        const now = this.resync.get(key);
        // A DELETED found by listing carries the object's last known state
        // (or only its identity, if that is all the watch kept) and the
        // listing's resourceVersion.
        if (!now || now.id.metadata.uid !== old.id.metadata.uid) {
          diff.push(mark('DELETED', old.object ?? old.id, event.resourceVersion));
        }
      }
      for (const key of [...this.resync.keys()].sort()) {
        const now = this.resync.get(key);
        const old = this.seen.get(key);
        if (!old || old.id.metadata.uid !== now.id.metadata.uid) {
          diff.push(mark('ADDED', now.object, now.id.metadata.resourceVersion));
        } else if (this.modified(old, now)) {
          diff.push(mark('MODIFIED', now.object, now.id.metadata.resourceVersion,
            this.view.includePrevious ? old.object : null));
        }
      }
    }
    diff.push({
      type: 'BOOKMARK', object: null, previousObject: null, resourceVersion: event.resourceVersion, resumeToken: event.resumeToken,
      initialEventsEnd: this.initialPending, resync: true, resyncReplaces: replaces,
    });
    this.pending.push(...diff);
    this.resync = null;
    this.resyncToken = '';
    this.knowsAll = true;
  }

  /**
   * Whether a re-sync found an object changed since the watch yielded it.
   * With fields, as the hub decides whether to send a MODIFIED: only a
   * change of what was asked for counts, not a new resourceVersion alone.
   */
  modified(old, now) {
    if (old.id.metadata.resourceVersion === now.id.metadata.resourceVersion) return false;
    if (this.view.fields.length === 0) return true;
    return canonicalJSON(withoutVersion(old.object)) !== canonicalJSON(withoutVersion(now.object));
  }
}

/** An object without its metadata.resourceVersion (a shallow copy). */
function withoutVersion(object) {
  const { resourceVersion: _, ...metadata } = object.metadata;
  return { ...object, metadata };
}

/** JSON with every object's keys sorted: equal for equal values, whatever their keys' order. */
function canonicalJSON(value) {
  if (Array.isArray(value)) return `[${value.map(canonicalJSON).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonicalJSON(value[k])}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/** What a watch remembers of an object it yielded, or null. */
function identityOf(object) {
  const m = object?.metadata;
  if (!m || typeof m.name !== 'string') return null;
  const metadata = { name: m.name, uid: m.uid, resourceVersion: m.resourceVersion };
  if (m.namespace) metadata.namespace = m.namespace;
  return { apiVersion: object.apiVersion, kind: object.kind, metadata };
}

function keyOf(id) {
  return `${id.metadata.namespace ?? ''}\u0000${id.metadata.name}`; // sorts as (namespace, name)
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
  });
}

function abortError(signal) {
  return signal.reason instanceof Error ? signal.reason : new DOMException('The watch was cancelled', 'AbortError');
}

/** An Error like those of grpc-js, with code and details. */
function statusError(code, message) {
  const err = new Error(`${code} ${grpc.status[code]}: ${message}`);
  err.code = code;
  err.details = message;
  err.metadata = new grpc.Metadata();
  return err;
}

// ---- Digests: whether a client holds what the hub holds ----

// A digest is a sum of 128-bit hashes modulo 2^128.
const DIGEST_MODULUS = 1n << 128n;
const NUL = Buffer.alloc(1);

/**
 * The hash of one object in a digest, a BigInt below 2^128, as the proto's
 * DigestResponse.digest defines it: of the object's metadata namespace,
 * name, uid and resourceVersion. Throws a TypeError for an object without
 * name, uid or resourceVersion: the hub's digest counts them, so one
 * without them could never match (a projection by fields keeps them).
 */
function objectHash(object) {
  const m = object?.metadata;
  const parts = [m?.namespace ?? '', m?.name, m?.uid, m?.resourceVersion];
  if (!parts.every((p) => typeof p === 'string')) {
    throw new TypeError(`informerhub: a digest needs metadata.name, uid and resourceVersion; ${JSON.stringify(m?.name)} lacks one`);
  }
  const sha = crypto.createHash('sha256');
  for (const p of parts) sha.update(p, 'utf8').update(NUL);
  return BigInt(`0x${sha.digest('hex').slice(0, 32)}`);
}

/**
 * The digest of the objects a client holds, as the proto's
 * DigestResponse.digest defines it, and their count. Start it from a
 * snapshot's objects (Digest.of), or empty before a watch's initial events,
 * and keep it up with apply as you apply each event to what you hold; then
 * at any event's token it matches the hub's digest there (Client.digest).
 * docs/grpcurl.md#digest works an example through.
 */
class Digest {
  #sum = 0n;
  #count = 0;

  /** The digest of objects (any iterable of them, e.g. a snapshot's). */
  static of(objects) {
    const digest = new Digest();
    for (const object of objects) digest.add(object);
    return digest;
  }

  /** How many objects it holds. */
  get count() {
    return this.#count;
  }

  /** Adds an object now held. */
  add(object) {
    this.#sum = (this.#sum + objectHash(object)) % DIGEST_MODULUS;
    this.#count++;
    return this;
  }

  /** Removes an object no longer held: the state that was added, resourceVersion included. */
  remove(object) {
    this.#sum = (this.#sum + DIGEST_MODULUS - objectHash(object)) % DIGEST_MODULUS;
    this.#count--;
    return this;
  }

  /**
   * Applies a watch event; held is the state of the event's object you
   * held before it (undefined if none). ADDED adds the object (in place of
   * held, if given: a re-sync that replaces lists as ADDED what you may
   * hold); MODIFIED replaces held with the object; DELETED removes held,
   * not the event's object, which carries the deletion's resourceVersion
   * rather than the state's. BOOKMARKs change nothing. A MODIFIED or
   * DELETED without held throws: the digest cannot be kept without it.
   */
  apply(event, held) {
    switch (event.type) {
      case 'ADDED':
        if (held) this.remove(held);
        return this.add(event.object);
      case 'MODIFIED':
        return this.remove(heldState(event, held)).add(event.object);
      case 'DELETED':
        return this.remove(heldState(event, held));
      case 'BOOKMARK':
        return this;
      default:
        throw new TypeError(`informerhub: an event of unknown type ${JSON.stringify(event.type)}`);
    }
  }

  /** Whether it equals the hub's digest (an answer of Client.digest): the same count and digest. */
  matches(answer) {
    return Number(answer.count) === this.#count && answer.digest === this.toString();
  }

  /** The digest as 32 lowercase hexadecimal digits, as DigestResponse.digest. */
  toString() {
    return this.#sum.toString(16).padStart(32, '0');
  }
}

function heldState(event, held) {
  if (!held) {
    throw new TypeError(`informerhub: a ${event.type} of ${JSON.stringify(event.object?.metadata?.name)} needs the state held before it`);
  }
  return held;
}

// ---- The error details of the hub (google.rpc.Status in the trailers) ----

/**
 * Adds what the hub says about an error to a grpc-js error: err.errorInfo
 * ({reason, domain, metadata}, from google.rpc.ErrorInfo), err.reason, and
 * err.fieldViolations ([{field, description}], from google.rpc.BadRequest).
 */
function withDetails(err) {
  if (err.errorInfo !== undefined || !err.metadata) return err;
  err.errorInfo = null;
  err.reason = '';
  err.fieldViolations = [];
  const raw = err.metadata.get('grpc-status-details-bin')[0];
  if (!raw) return err;
  try {
    for (const [no, value] of fields(raw)) {
      if (no !== 3) continue; // google.rpc.Status.details: repeated Any
      let type = '';
      let body = Buffer.alloc(0);
      for (const [f, v] of fields(value)) {
        if (f === 1) type = v.toString();
        if (f === 2) body = v;
      }
      if (type.endsWith('/google.rpc.ErrorInfo')) {
        const info = { reason: '', domain: '', metadata: {} };
        for (const [f, v] of fields(body)) {
          if (f === 1) info.reason = v.toString();
          if (f === 2) info.domain = v.toString();
          if (f === 3) {
            const entry = {};
            for (const [g, w] of fields(v)) entry[g] = w.toString();
            info.metadata[entry[1] ?? ''] = entry[2] ?? '';
          }
        }
        err.errorInfo = info;
        err.reason = info.reason;
      } else if (type.endsWith('/google.rpc.BadRequest')) {
        for (const [f, v] of fields(body)) {
          if (f !== 1) continue;
          const violation = { field: '', description: '' };
          for (const [g, w] of fields(v)) {
            if (g === 1) violation.field = w.toString();
            if (g === 2) violation.description = w.toString();
          }
          err.fieldViolations.push(violation);
        }
      }
    }
  } catch {
    // Details we cannot read do not change the error.
  }
  return err;
}

/** Yields [field number, value] of a protobuf message: varints as numbers, length-delimited as Buffers. */
function* fields(buf) {
  let i = 0;
  const varint = () => {
    let v = 0;
    for (let shift = 1; ; shift *= 128) {
      if (i >= buf.length) throw new Error('truncated varint');
      const b = buf[i++];
      v += (b & 0x7f) * shift;
      if (b < 0x80) return v;
    }
  };
  while (i < buf.length) {
    const key = varint();
    const no = Math.floor(key / 8);
    switch (key % 8) {
      case 0:
        yield [no, varint()];
        break;
      case 1:
        i += 8;
        break;
      case 2: {
        const len = varint();
        if (i + len > buf.length) throw new Error('truncated field');
        yield [no, buf.subarray(i, i + len)];
        i += len;
        break;
      }
      case 5:
        i += 4;
        break;
      default:
        throw new Error(`unsupported wire type ${key % 8}`);
    }
  }
}

module.exports = {
  connect, Client, Watch, ResumingWatch, ObjectFormat, Digest, objectHash, loadService, isLoopback, status: grpc.status, PROTO_DIR,
};
