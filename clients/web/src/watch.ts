// A Watch that resumes exactly: it reconnects from the last token it
// received, re-syncs when the hub can no longer resume, and ends only on
// errors that retrying cannot fix. The same algorithm as the Node.js client
// (clients/node/informerhub.js) and the Go SDK (clients/go/watch.go); what
// each status means is the contract of proto/informerhub/v1/informerhub.proto.

import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import { ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { EventType, type WatchResponse } from "./gen/informerhub/v1/informerhub_pb.js";
import {
  hubClient,
  objectFormatProto,
  objectOf,
  selectorProto,
  type KubeObject,
  type Selector,
  type ViewOptions,
} from "./calls.js";
import { errorReason } from "./errors.js";

/** The header of a Watch's response that holds the token of the stream's start. */
export const RESUME_TOKEN_HEADER = "resume-token";

/** What an event reports. */
export type EventTypeName = "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK";

/** One event of a watch. */
export interface WatchEvent {
  readonly type: EventTypeName;
  /** The object (projected by fields); null on a BOOKMARK. */
  readonly object: KubeObject | null;
  /** On a MODIFIED with includePrevious: the state before the change; else null. */
  readonly previousObject: KubeObject | null;
  /** The Kubernetes resourceVersion. Informational: resume with resumeToken. */
  readonly resourceVersion: string;
  /** A watch from this token continues right after this event. */
  readonly resumeToken: string;
  /** Set on the BOOKMARK that closes the initial events. */
  readonly initialEventsEnd: boolean;
  /** A difference the hub found by relisting: what happened in between is unknown. */
  readonly fromRelist: boolean;
  /** Why the filter could not decide on the object (it is delivered as if it matched); "" otherwise. */
  readonly filterError: string;
  /**
   * A difference computed by a re-sync of this client: the hub could not
   * resume (OUT_OF_RANGE), so the watch listed again and yields how the list
   * differs from what it had yielded, ending with a BOOKMARK marked resync.
   */
  readonly resync: boolean;
  /**
   * On a re-sync of a watch that started from a resumeToken (so it does not
   * know what the caller holds): every object comes as ADDED, and the caller
   * drops whatever it holds that the re-sync did not list, at its BOOKMARK.
   */
  readonly resyncReplaces: boolean;
}

/** Reconnection delays: initialMs, times multiplier after each failure, up to maxMs, ± jitter. */
export interface Backoff {
  readonly initialMs: number;
  readonly maxMs: number;
  readonly multiplier: number;
  /** A fraction: 0.2 spreads each delay over ±20%. */
  readonly jitter: number;
}

export const DEFAULT_BACKOFF: Backoff = { initialMs: 100, maxMs: 30_000, multiplier: 2, jitter: 0.2 };

export interface WatchOptions extends ViewOptions {
  /** Continue right after the event (or snapshot) that carried this token. */
  readonly resumeToken?: string;
  /** Every matching object as ADDED first, then a BOOKMARK with initialEventsEnd. */
  readonly sendInitialEvents?: boolean;
  /** MODIFIED events carry previousObject. */
  readonly includePrevious?: boolean;
  /** Ends the watch: iteration stops without an error. */
  readonly signal?: AbortSignal;
  readonly backoff?: Partial<Backoff>;
  /**
   * Called before each reconnection, with the error that ended the stream
   * and the number of consecutive failed attempts (0 for a re-sync, which
   * reconnects at once).
   */
  readonly onRetry?: (err: ConnectError, failures: number) => void;
  /** Called when a stream is established: its response headers arrived. */
  readonly onConnected?: () => void;
}

/**
 * Watches selector, resuming exactly (see ResumingWatch). Iterate the result
 * with for await; it throws the errors that retrying cannot fix.
 */
export function watch(transport: Transport, selector: Selector, options: WatchOptions = {}): ResumingWatch {
  return new ResumingWatch(transport, selector, options);
}

// Statuses that retrying cannot fix: the watch ends with them. The proto
// says, for each, what the caller must change first.
const FATAL = new Set<Code>([
  Code.InvalidArgument,
  Code.NotFound,
  Code.PermissionDenied,
  Code.Unauthenticated,
  Code.Unimplemented,
]);

const EVENT_TYPES: Readonly<Record<EventType, EventTypeName | undefined>> = {
  [EventType.UNSPECIFIED]: undefined,
  [EventType.ADDED]: "ADDED",
  [EventType.MODIFIED]: "MODIFIED",
  [EventType.DELETED]: "DELETED",
  [EventType.BOOKMARK]: "BOOKMARK",
};

function eventOf(resp: WatchResponse): WatchEvent {
  const type = EVENT_TYPES[resp.type];
  if (type === undefined) throw new ConnectError(`informerhub: an event of unknown type ${resp.type}`, Code.Internal);
  return {
    type,
    object: objectOf(resp.object, resp.objectStruct),
    previousObject: objectOf(resp.previousObject, resp.previousObjectStruct),
    resourceVersion: resp.resourceVersion,
    resumeToken: resp.resumeToken,
    initialEventsEnd: resp.initialEventsEnd,
    fromRelist: resp.fromRelist,
    filterError: resp.filterError,
    resync: false,
    resyncReplaces: false,
  };
}

/** What the watch remembers of an object it yielded. */
interface Seen {
  readonly id: Identity;
  /** The object itself, when a re-sync needs it (fields or includePrevious); else null. */
  readonly object: KubeObject | null;
}

/** An object reduced to what identifies it and its version. */
type Identity = KubeObject & {
  metadata: { name: string; namespace?: string; uid?: string; resourceVersion?: string };
};

/**
 * A watch without gaps. On a disconnect that retrying can fix (the network,
 * UNAVAILABLE, RESOURCE_EXHAUSTED, INTERNAL, a stream that just ends, …) it
 * reconnects after an exponential backoff with jitter, from the token of the
 * last event it yielded, or, before the first, from the token of the
 * stream's start, which the hub sends in the "resume-token" header: so no
 * event is lost or repeated. On OUT_OF_RANGE (the token expired) it lists
 * again, with send_initial_events, and yields the differences from what it
 * had yielded, marked resync. It throws INVALID_ARGUMENT, NOT_FOUND,
 * PERMISSION_DENIED, UNAUTHENTICATED (but for a running stream whose
 * credentials expired: it reconnects once with getToken's current ones),
 * UNIMPLEMENTED, and INTERNAL · OBJECT_UNSENDABLE (resuming would meet the
 * same object again). After it threw, resumeToken is where a new watch (with
 * new credentials, or access granted) continues.
 */
export class ResumingWatch implements AsyncIterable<WatchEvent> {
  private readonly transport: Transport;
  private readonly selector: Selector;
  private readonly options: WatchOptions;
  private readonly backoff: Backoff;
  private readonly controller = new AbortController();
  private readonly signal: AbortSignal;
  private iterating = false;

  private token: string;
  /** The token came from the hub, so it covers sendInitialEvents. */
  private tokenFromHub = false;
  /** Initial events asked for and not yet ended. */
  private initialPending: boolean;
  /** Consecutive failed attempts, for the backoff. */
  private failures = 0;
  /**
   * What the watch has yielded: every object that exists for the caller,
   * by key. A re-sync diffs against it if it is all the caller holds
   * (knowsAll): not so for a watch that started from a token.
   */
  private readonly seen = new Map<string, Seen>();
  private readonly keepObjects: boolean;
  private knowsAll: boolean;
  /** During a re-sync: the objects listed so far; null otherwise. */
  private resync: Map<string, Seen> | null = null;
  /** During a re-sync: where to go on listing if its stream breaks. */
  private resyncToken = "";
  /** Events a re-sync computed, not yet yielded. */
  private readonly pending: WatchEvent[] = [];

  constructor(transport: Transport, selector: Selector, options: WatchOptions = {}) {
    this.transport = transport;
    this.selector = selector;
    this.options = options;
    selectorProto(selector); // a selector without version or resource throws now, not at the first call
    objectFormatProto(options.objectFormat);
    this.backoff = { ...DEFAULT_BACKOFF, ...options.backoff };
    this.signal = options.signal ? AbortSignal.any([options.signal, this.controller.signal]) : this.controller.signal;
    this.token = options.resumeToken ?? "";
    this.initialPending = options.sendInitialEvents ?? false;
    this.keepObjects = (options.fields?.length ?? 0) > 0 || (options.includePrevious ?? false);
    this.knowsAll = this.token === "";
  }

  /**
   * The token of the last event yielded (or of the stream's start, or the
   * one given): a watch from it continues exactly after what this one yielded.
   */
  get resumeToken(): string {
    return this.token;
  }

  /** Ends the watch: the stream is cancelled, and iteration stops without an error. */
  cancel(): void {
    this.controller.abort();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<WatchEvent> {
    if (this.iterating) throw new Error("informerhub: a watch can be iterated once");
    this.iterating = true;
    let stream: Stream | null = null;
    try {
      for (;;) {
        if (this.signal.aborted) return;
        const next = this.pending.shift();
        if (next !== undefined) {
          this.deliver(next);
          yield next;
          continue;
        }
        if (stream === null) {
          await this.sleepBackoff();
          if (this.signal.aborted) return;
          stream = this.open();
          continue;
        }
        let resp: WatchResponse;
        try {
          const r = await stream.messages.next();
          if (r.done === true) throw new ConnectError("informerhub: the hub ended the stream", Code.Unavailable);
          resp = r.value;
        } catch (err) {
          stream.cancel();
          const gotEvent = stream.gotEvent;
          stream = null;
          this.failed(err, gotEvent);
          continue;
        }
        stream.gotEvent = true;
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

  /** Waits as long as the failures call for; returns at once when aborted. */
  private async sleepBackoff(): Promise<void> {
    if (this.failures === 0) return;
    const b = this.backoff;
    let delay = Math.min(b.initialMs * b.multiplier ** (this.failures - 1), b.maxMs);
    delay *= 1 + b.jitter * (2 * Math.random() - 1);
    if (delay <= 0) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.signal.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, delay);
      this.signal.addEventListener("abort", done, { once: true });
    });
  }

  /** Opens a stream from where the watch is. */
  private open(): Stream {
    let resumeToken = this.token;
    let sendInitialEvents = false;
    if (this.resync !== null) {
      // List again, or go on listing from where the last stream broke.
      resumeToken = this.resyncToken;
      sendInitialEvents = this.resyncToken === "";
    } else if (!this.tokenFromHub) {
      // Until the hub has issued a token, ask for what the caller asked; the
      // hub's tokens carry the initial events' progress themselves.
      sendInitialEvents = this.options.sendInitialEvents ?? false;
    }
    const fromHeaders = !this.tokenFromHub && this.resync === null;
    const controller = new AbortController();
    const signal = AbortSignal.any([this.signal, controller.signal]);
    const request = {
      selector: selectorProto(this.selector),
      resumeToken,
      sendInitialEvents,
      fields: [...(this.options.fields ?? [])],
      includePrevious: this.options.includePrevious ?? false,
      objectFormat: objectFormatProto(this.options.objectFormat),
    };
    const responses = hubClient(this.transport).watch(request, {
      signal,
      onHeader: (headers) => {
        // The token of the stream's start, so that a reconnection before the
        // first event loses nothing. Headers come before any message.
        const token = headers.get(RESUME_TOKEN_HEADER);
        if (fromHeaders && token && !this.tokenFromHub) this.adopt(token);
        this.options.onConnected?.();
      },
    });
    return {
      messages: responses[Symbol.asyncIterator](),
      gotEvent: false,
      cancel: () => controller.abort(),
    };
  }

  private adopt(token: string): void {
    this.token = token;
    this.tokenFromHub = true;
  }

  /** Decides what a stream's error means for the watch: throws if it ends it. */
  private failed(reason: unknown, gotEvent: boolean): void {
    if (this.signal.aborted) return;
    const err = ConnectError.from(reason);
    // With gRPC-Web, a call that fails before its first message may come as
    // trailers only: the start's token is then among the error's metadata.
    const token = err.metadata.get(RESUME_TOKEN_HEADER);
    if (!gotEvent && token && !this.tokenFromHub && this.resync === null) this.adopt(token);
    const errorInfoToken = resumeTokenOf(err);
    switch (err.code) {
      case Code.OutOfRange:
        // The token expired: list again and yield the differences.
        this.resync = new Map();
        this.resyncToken = "";
        this.failures = 0;
        break;
      case Code.Unauthenticated:
        // The credentials that opened a running stream expired: reconnect
        // with the token source's current ones; if those are refused, end.
        if (errorInfoToken === "") throw err;
        this.failures++;
        break;
      case Code.Internal:
        // The hub cannot send an object: resuming meets it again.
        if (errorReason(err) === "OBJECT_UNSENDABLE") throw err;
        this.failures++;
        break;
      default:
        if (FATAL.has(err.code)) throw err;
        this.failures++;
    }
    this.options.onRetry?.(err, this.failures);
  }

  /** Records event as yielded to the caller. */
  private deliver(event: WatchEvent): void {
    if (event.resumeToken) this.adopt(event.resumeToken);
    if (event.initialEventsEnd) this.initialPending = false;
    const id = identityOf(event.object);
    if (id === null) return;
    if (event.type === "DELETED") this.seen.delete(keyOf(id));
    else this.seen.set(keyOf(id), { id, object: this.keepObjects ? event.object : null });
  }

  /** Gathers a re-sync's objects; at their end, computes the differences. */
  private collect(event: WatchEvent): void {
    const listed = this.resync;
    if (listed === null) return;
    if (event.type === "ADDED" && event.object !== null) {
      const id = identityOf(event.object);
      if (id !== null) listed.set(keyOf(id), { id, object: event.object });
      this.resyncToken = event.resumeToken;
      return;
    }
    if (!event.initialEventsEnd) return;
    // Until the re-sync is complete, its events carry the last token from
    // before it: a caller that stops halfway re-syncs again.
    const before = this.token;
    const replaces = !this.knowsAll;
    const mark = (type: EventTypeName, object: KubeObject, resourceVersion: string, previousObject: KubeObject | null = null): WatchEvent => ({
      type,
      object,
      previousObject,
      resourceVersion,
      resumeToken: before,
      initialEventsEnd: false,
      fromRelist: false,
      filterError: "",
      resync: true,
      resyncReplaces: replaces,
    });
    const diff: WatchEvent[] = [];
    const listedKeys = [...listed.keys()].sort();
    if (replaces) {
      // What the caller holds is unknown: list it all.
      for (const key of listedKeys) {
        const now = listed.get(key)!;
        diff.push(mark("ADDED", now.object!, now.id.metadata.resourceVersion ?? ""));
      }
      this.seen.clear();
    } else {
      for (const key of [...this.seen.keys()].sort()) {
        const old = this.seen.get(key)!;
        const now = listed.get(key);
        // A DELETED found by listing carries the object's last known state
        // (or only its identity, if that is all the watch kept) and the
        // listing's resourceVersion.
        if (now === undefined || now.id.metadata.uid !== old.id.metadata.uid) {
          diff.push(mark("DELETED", old.object ?? old.id, event.resourceVersion));
        }
      }
      for (const key of listedKeys) {
        const now = listed.get(key)!;
        const old = this.seen.get(key);
        const version = now.id.metadata.resourceVersion ?? "";
        if (old === undefined || old.id.metadata.uid !== now.id.metadata.uid) {
          diff.push(mark("ADDED", now.object!, version));
        } else if (this.modified(old, now)) {
          diff.push(mark("MODIFIED", now.object!, version, this.options.includePrevious ? old.object : null));
        }
      }
    }
    diff.push({
      type: "BOOKMARK",
      object: null,
      previousObject: null,
      resourceVersion: event.resourceVersion,
      resumeToken: event.resumeToken,
      initialEventsEnd: this.initialPending,
      fromRelist: false,
      filterError: "",
      resync: true,
      resyncReplaces: replaces,
    });
    this.pending.push(...diff);
    this.resync = null;
    this.resyncToken = "";
    this.knowsAll = true;
  }

  /**
   * Whether a re-sync found an object changed since the watch yielded it.
   * With fields, as the hub decides whether to send a MODIFIED: only a
   * change of what was asked for counts, not a new resourceVersion alone.
   */
  private modified(old: Seen, now: Seen): boolean {
    if (old.id.metadata.resourceVersion === now.id.metadata.resourceVersion) return false;
    if ((this.options.fields?.length ?? 0) === 0) return true;
    if (old.object === null || now.object === null) return true;
    return canonicalJSON(withoutVersion(old.object)) !== canonicalJSON(withoutVersion(now.object));
  }
}

/** One Watch call in progress. */
interface Stream {
  readonly messages: AsyncIterator<WatchResponse>;
  /** Whether it delivered a response. */
  gotEvent: boolean;
  readonly cancel: () => void;
}

/** The ErrorInfo metadata "resume_token": set when the hub ended a running Watch. */
function resumeTokenOf(err: ConnectError): string {
  return err.findDetails(ErrorInfoSchema)[0]?.metadata["resume_token"] ?? "";
}

/** An object without its metadata.resourceVersion (a shallow copy). */
function withoutVersion(object: KubeObject): KubeObject {
  if (object.metadata === undefined) return object;
  const { resourceVersion: _, ...metadata } = object.metadata;
  return { ...object, metadata };
}

/** JSON with every object's keys sorted: equal for equal values, whatever their keys' order. */
export function canonicalJSON(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJSON).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const o = value as Record<string, unknown>;
    return `{${Object.keys(o)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJSON(o[k])}`)
      .join(",")}}`;
  }
  return JSON.stringify(value);
}

/** What identifies an object and its version, or null for an object without a name. */
function identityOf(object: KubeObject | null): Identity | null {
  const m = object?.metadata;
  if (object === null || m === undefined || typeof m.name !== "string") return null;
  const metadata: Identity["metadata"] = { name: m.name };
  if (typeof m.namespace === "string" && m.namespace !== "") metadata.namespace = m.namespace;
  if (typeof m.uid === "string") metadata.uid = m.uid;
  if (typeof m.resourceVersion === "string") metadata.resourceVersion = m.resourceVersion;
  const id: Identity = { metadata };
  if (typeof object.apiVersion === "string") id.apiVersion = object.apiVersion;
  if (typeof object.kind === "string") id.kind = object.kind;
  return id;
}

/** The key of an object: sorts as (namespace, name). */
export function objectKey(namespace: string, name: string): string {
  return `${namespace}\u0000${name}`;
}

function keyOf(id: Identity): string {
  return objectKey(id.metadata.namespace ?? "", id.metadata.name);
}
