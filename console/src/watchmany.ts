// Several watches on one WatchMany stream, resumed as the web client's
// watch resumes one: from the last response's token (or the stream's start
// token, before the first), after a backoff, on errors that retrying can
// fix. On OUT_OF_RANGE it lists everything again and marks the events
// resync, so that the table drops what the new list lacks; as the web
// client's watch does, its token stays the one from before the re-sync
// until the listing ends (so a watch resumed from it re-syncs too), and a
// listing whose stream breaks goes on from where it was. The console
// uses it when several resource types are selected: one stream, one of the
// six HTTP/1.1 connections a browser allows per origin.

import {
  Code,
  ConnectError,
  DEFAULT_BACKOFF,
  RESUME_TOKEN_HEADER,
  errorReason,
  hubClient,
  selectorProto,
  type Backoff,
  type KubeObject,
  type Selector,
  type WatchEvent,
  type createTransport,
} from "@informerhub/web";

type Transport = ReturnType<typeof createTransport>;
import { EventType, type WatchManyResponse } from "../../clients/web/src/gen/informerhub/v1/informerhub_pb.js";

/** An event of one of the watches. */
export interface ManyEvent {
  /** Which selector it belongs to, from 0. */
  readonly index: number;
  /**
   * As Watch's; initialEventsEnd is set only on the event after which every
   * watch's initial events have been sent.
   */
  readonly event: WatchEvent;
  /**
   * Set on the first event of a re-sync's listing from its start: what an
   * earlier, broken attempt listed no longer counts (ObjectTable.beginResync).
   */
  readonly resyncStart?: boolean;
}

export interface WatchManyOptions {
  readonly resumeToken?: string;
  readonly sendInitialEvents?: boolean;
  readonly includePrevious?: boolean;
  readonly fields?: readonly string[];
  readonly backoff?: Partial<Backoff>;
  readonly onRetry?: (err: ConnectError, failures: number) => void;
  readonly onConnected?: () => void;
}

const FATAL = new Set<Code>([Code.InvalidArgument, Code.NotFound, Code.PermissionDenied, Code.Unauthenticated, Code.Unimplemented]);

const TYPES: Partial<Record<EventType, WatchEvent["type"]>> = {
  [EventType.ADDED]: "ADDED",
  [EventType.MODIFIED]: "MODIFIED",
  [EventType.DELETED]: "DELETED",
  [EventType.BOOKMARK]: "BOOKMARK",
};

const parse = (json: string): KubeObject | null => (json === "" ? null : (JSON.parse(json) as KubeObject));

export class ResumingWatchMany implements AsyncIterable<ManyEvent> {
  private readonly controller = new AbortController();
  private readonly backoff: Backoff;
  private token: string;
  private tokenFromHub = false;
  private failures = 0;
  /** Listing everything again after OUT_OF_RANGE, until the initial events end. */
  private resyncing = false;
  /** During a re-sync: where to go on listing if its stream breaks ("": from the start). */
  private resyncToken = "";
  /** A listing from the start was opened and has yielded nothing yet. */
  private resyncStartPending = false;

  constructor(
    private readonly transport: Transport,
    private readonly selectors: readonly Selector[],
    private readonly options: WatchManyOptions = {},
  ) {
    this.backoff = { ...DEFAULT_BACKOFF, ...options.backoff };
    this.token = options.resumeToken ?? "";
  }

  /**
   * Resumes every watch right after the last event yielded; during a
   * re-sync, the token from before it: a watch resumed from it re-syncs.
   */
  get resumeToken(): string {
    return this.token;
  }

  cancel(): void {
    this.controller.abort();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<ManyEvent> {
    const signal = this.controller.signal;
    while (!signal.aborted) {
      await this.sleepBackoff();
      if (signal.aborted) return;
      const resync = this.resyncing;
      // A re-sync lists from the start, or goes on from where its listing broke.
      const sendInitialEvents = resync ? this.resyncToken === "" : !this.tokenFromHub && (this.options.sendInitialEvents ?? false);
      if (resync && this.resyncToken === "") this.resyncStartPending = true;
      const fromHeaders = !this.tokenFromHub;
      const call = new AbortController();
      const responses = hubClient(this.transport).watchMany(
        {
          resumeToken: resync ? this.resyncToken : this.token,
          watches: this.selectors.map((s) => ({
            selector: selectorProto(s),
            sendInitialEvents,
            includePrevious: this.options.includePrevious ?? false,
            fields: [...(this.options.fields ?? [])],
          })),
        },
        {
          signal: AbortSignal.any([signal, call.signal]),
          onHeader: (headers) => {
            const token = headers.get(RESUME_TOKEN_HEADER);
            if (fromHeaders && !resync && token) this.adopt(token);
            this.options.onConnected?.();
          },
        },
      );
      try {
        for await (const resp of responses) {
          this.failures = 0;
          // Events are marked resync until the re-sync's initial events end.
          let event = this.eventOf(resp, this.resyncing);
          if (!this.resyncing) {
            this.adopt(resp.resumeToken);
          } else if (resp.initialEventsEnd) {
            // The listing is complete: its end's token is the watch's.
            this.adopt(resp.resumeToken);
            this.resyncing = false;
            this.resyncToken = "";
          } else if (resp.resumeToken !== "") {
            this.resyncToken = resp.resumeToken;
          }
          if (event !== null && this.resyncStartPending) {
            event = { ...event, resyncStart: true };
            this.resyncStartPending = false;
          }
          if (event !== null) yield event;
          if (signal.aborted) return;
        }
        throw new ConnectError("the hub ended the stream", Code.Unavailable);
      } catch (reason) {
        if (signal.aborted) return;
        this.failed(reason);
      } finally {
        call.abort();
      }
    }
  }

  private adopt(token: string): void {
    if (token === "") return;
    this.token = token;
    this.tokenFromHub = true;
  }

  private eventOf(resp: WatchManyResponse, resync: boolean): ManyEvent | null {
    const e = resp.event;
    if (e === undefined) return null;
    const type = TYPES[e.type];
    if (type === undefined) return null;
    const end = resp.initialEventsEnd;
    return {
      index: resp.index,
      event: {
        type,
        object: parse(e.object),
        previousObject: parse(e.previousObject),
        resourceVersion: e.resourceVersion,
        resumeToken: e.resumeToken,
        initialEventsEnd: end,
        fromRelist: e.fromRelist,
        filterError: e.filterError,
        // During a re-sync every object comes again as ADDED; the table
        // drops what the list lacked at the end of the initial events.
        resync: resync && (type !== "BOOKMARK" || end),
        resyncReplaces: resync && (type !== "BOOKMARK" || end),
      },
    };
  }

  private failed(reason: unknown): void {
    const err = ConnectError.from(reason);
    switch (err.code) {
      case Code.OutOfRange:
        // List again at once; but a listing refused too waits its backoff.
        // (The listing's own token expired too: from the start again.)
        if (this.resyncing) this.failures++;
        else this.failures = 0;
        this.resyncing = true;
        this.resyncToken = "";
        break;
      case Code.Internal:
        if (errorReason(err) === "OBJECT_UNSENDABLE") throw err;
        this.failures++;
        break;
      default:
        if (FATAL.has(err.code)) {
          // Resume (after the cause is fixed) continues from the token in
          // the error, if the hub gave one.
          const token = err.metadata.get(RESUME_TOKEN_HEADER);
          if (token && !this.tokenFromHub && !this.resyncing) this.adopt(token);
          throw err;
        }
        this.failures++;
    }
    this.options.onRetry?.(err, this.failures);
  }

  private async sleepBackoff(): Promise<void> {
    if (this.failures === 0) return;
    const b = this.backoff;
    let delay = Math.min(b.initialMs * b.multiplier ** (this.failures - 1), b.maxMs);
    delay *= 1 + b.jitter * (2 * Math.random() - 1);
    const signal = this.controller.signal;
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, delay);
      signal.addEventListener("abort", done, { once: true });
    });
  }
}
