'use strict';
// Helpers of the test suite (test/): the environment the Go driver
// (test/clients/node_test.go) sets, ConfigMap writes through the Kubernetes
// REST API, and reading events with a deadline.

const fs = require('node:fs');
const https = require('node:https');

/**
 * The environment of a test run against a real hub, as clientEnv in
 * test/clients/main_test.go sets it. Missing variables fail the test.
 */
function hubEnv() {
  const names = [
    'INFORMERHUB_ADDR', 'INFORMERHUB_SHORT_HISTORY_ADDR', 'INFORMERHUB_SHORT_HISTORY_SIZE', 'INFORMERHUB_LIMITED_ADDR',
    'INFORMERHUB_TOKEN', 'KUBE_SERVER', 'KUBE_CA_FILE', 'KUBE_TOKEN', 'TEST_NAMESPACE',
  ];
  const missing = names.filter((n) => !process.env[n]);
  if (missing.length > 0) {
    throw new Error(`missing ${missing.join(', ')}: these tests need a hub and an API server; ` +
      'run them with `go test -run TestNodeClient ./test/clients/` from the repository root');
  }
  return Object.fromEntries(names.map((n) => [n, process.env[n]]));
}

/** Writes ConfigMaps in one namespace through the Kubernetes REST API. */
class Kube {
  constructor(env) {
    this.server = new URL(env.KUBE_SERVER);
    this.ca = fs.readFileSync(env.KUBE_CA_FILE);
    this.token = env.KUBE_TOKEN;
    this.namespace = env.TEST_NAMESPACE;
  }

  request(method, path, body, contentType = 'application/json') {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    return new Promise((resolve, reject) => {
      const req = https.request({
        method,
        hostname: this.server.hostname,
        port: this.server.port,
        path,
        ca: this.ca,
        headers: {
          Authorization: `Bearer ${this.token}`,
          Accept: 'application/json',
          ...(payload === undefined ? {} : { 'Content-Type': contentType, 'Content-Length': Buffer.byteLength(payload) }),
        },
        timeout: 30000,
      }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          if (res.statusCode < 200 || res.statusCode >= 300) {
            reject(new Error(`${method} ${path}: ${res.statusCode} ${text}`));
            return;
          }
          resolve(JSON.parse(text));
        });
        res.on('error', reject);
      });
      req.on('timeout', () => req.destroy(new Error(`${method} ${path}: timed out`)));
      req.on('error', reject);
      req.end(payload);
    });
  }

  path(name = '') {
    return `/api/v1/namespaces/${encodeURIComponent(this.namespace)}/configmaps${name ? `/${encodeURIComponent(name)}` : ''}`;
  }

  /** Creates a ConfigMap; returns it as the API server stored it. */
  create(name, labels, data = {}) {
    return this.request('POST', this.path(), { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, labels }, data });
  }

  /** Merges data into a ConfigMap; returns it as the API server stored it. */
  modify(name, data) {
    return this.request('PATCH', this.path(name), { data }, 'application/merge-patch+json');
  }

  /** Deletes a ConfigMap; returns what the API server answered. */
  delete(name) {
    return this.request('DELETE', this.path(name));
  }
}

/**
 * Reads the events of a watch (any async iterable) as a real consumer does,
 * all the time, and hands them out one at a time, each within timeoutMs: a
 * watch that goes quiet fails the test rather than hanging it. An error
 * that ends the watch is thrown after the events before it.
 */
class EventReader {
  constructor(watch, timeoutMs = 20000) {
    this.watch = watch;
    this.timeoutMs = timeoutMs;
    this.buffer = [];
    this.log = []; // every event handed out, for failure messages
    this.ended = false;
    this.error = null;
    this.wake = null;
    this.pump = (async () => {
      try {
        for await (const e of watch) {
          this.buffer.push(e);
          this.wake?.();
        }
      } catch (err) {
        this.error = err;
      }
      this.ended = true;
      this.wake?.();
    })();
  }

  /** The next event, bookmarks included. */
  async next(what = 'the next event') {
    const deadline = Date.now() + this.timeoutMs;
    for (;;) {
      if (this.buffer.length > 0) {
        const e = this.buffer.shift();
        this.log.push(e);
        return e;
      }
      if (this.error) throw this.error;
      if (this.ended) throw new Error(`the watch ended while waiting for ${what}`);
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new Error(`no event within ${this.timeoutMs}ms while waiting for ${what}; events so far:\n${this.log.map(describe).join('\n')}`);
      }
      let timer;
      await new Promise((resolve) => {
        this.wake = resolve;
        timer = setTimeout(resolve, left);
      });
      clearTimeout(timer);
      this.wake = null;
    }
  }

  /**
   * The next event that is not a periodic bookmark (the hub sends those on
   * quiet streams, at any time). The bookmark that ends the initial events
   * is returned.
   */
  async nextChange(what) {
    for (;;) {
      const e = await this.next(what);
      if (e.type !== 'BOOKMARK' || e.initialEventsEnd || e.resync) return e;
    }
  }

  /** Ends the watch (which cancels its call) and waits until it has. */
  async close() {
    if (typeof this.watch.cancel === 'function') this.watch.cancel();
    else if (typeof this.watch.close === 'function') this.watch.close();
    await this.pump;
  }
}

/** A short description of an event, for comparisons and messages. */
function describe(e) {
  if (typeof e !== 'object' || e === null) return String(e);
  if (e.type === 'BOOKMARK') return `BOOKMARK${e.initialEventsEnd ? ' (initial events end)' : ''}`;
  return `${e.type} ${e.object?.metadata?.name} @${e.resourceVersion}`;
}

module.exports = { hubEnv, Kube, EventReader, describe };
