// An in-memory InformerHubService for tests: a history of changes to named
// objects, served by Watch with the hub's token semantics, and faults a test
// plans per call. Tokens are readable here (a real hub's are opaque):
// "t<n>" is the position after the n-th change; "i<s>.<k>" is inside the
// initial events of position s, after k of its objects.

import { create, type JsonObject } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createConnectRouter,
  createRouterTransport,
  type ConnectRouter,
  type HandlerContext,
  type Interceptor,
  type Transport,
} from "@connectrpc/connect";
import { createFetchHandler } from "@connectrpc/connect/protocol";
import { BadRequestSchema, ErrorInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import {
  EventType,
  InformerHubService,
  WatchManyResponseSchema,
  WatchResponseSchema,
  type WatchManyRequest,
  type WatchManyResponse,
  type WatchRequest,
  type WatchResponse,
} from "../src/gen/informerhub/v1/informerhub_pb.js";

export type ChangeType = "ADDED" | "MODIFIED" | "DELETED";

interface Change {
  readonly type: ChangeType;
  readonly object: JsonObject;
}

/** What a planned call does instead of serving normally. */
export type Fault =
  /** Fails at once, before any header. */
  | { readonly kind: "refuse"; readonly error: ConnectError }
  /** Sends its headers and `after` events, then fails. */
  | { readonly kind: "fail"; readonly after: number; readonly error: ConnectError }
  /** Sends its headers and `after` events, then ends cleanly, as a cut connection may look. */
  | { readonly kind: "end"; readonly after: number };

/** A hub status, as the real hub makes it: the code, an ErrorInfo, maybe a BadRequest. */
export function hubStatus(
  code: Code,
  reason: string,
  metadata: Record<string, string> = {},
  violations: { field: string; description: string }[] = [],
): ConnectError {
  const details = [{ desc: ErrorInfoSchema, value: { reason, domain: "informerhub.io", metadata } }];
  const badRequest = violations.length > 0 ? [{ desc: BadRequestSchema, value: { fieldViolations: violations } }] : [];
  return new ConnectError(`fake hub: ${reason}`, code, undefined, [...details, ...badRequest]);
}

export class FakeHub {
  private readonly log: Change[] = [];
  private readonly uids = new Map<string, number>();
  private wake: (() => void)[] = [];
  /** Count streams waiting for a change (interruptions are for watches only). */
  private countWake: (() => void)[] = [];
  /** The faults of the next calls, in order; a call with none serves normally. */
  readonly faults: (Fault | undefined)[] = [];
  /** Every Watch request received. */
  readonly requests: WatchRequest[] = [];
  /** The Authorization header of every call, in order. */
  readonly authorizations: string[] = [];
  /** Every WatchMany request received. */
  readonly manyRequests: WatchManyRequest[] = [];
  /** The Count calls received. */
  counts = 0;
  /** Count streams open now. */
  openCounts = 0;
  /** What ListResources says of WatchMany (0: nothing). */
  maxWatchesPerStream = 0;
  /** Tokens of positions before this are expired (OUT_OF_RANGE). */
  expiredBefore = 0;
  /** What ListResources answers. */
  resources = [{ version: "v1", resource: "configmaps", kind: "ConfigMap", namespaced: true, selectableFields: ["metadata.name", "metadata.namespace"] }];
  /** The errors that end the streams running now, as they next look for a change. */
  private interruptions: ConnectError[] = [];

  /** Applies a change: streams that are caught up send it at once. */
  apply(type: ChangeType, name: string, data: Record<string, string> = {}): void {
    if (type === "ADDED") this.uids.set(name, (this.uids.get(name) ?? 0) + 1);
    const resourceVersion = String(this.log.length + 1);
    const object = {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name, namespace: "demo", uid: `${name}-${this.uids.get(name)}`, resourceVersion },
      data,
    };
    this.log.push({ type, object });
    this.wakeAll();
  }

  /** Ends every stream running now with err, as a hub shutting down or a cut connection would. */
  interrupt(err: ConnectError): void {
    this.interruptions = Array.from({ length: this.wake.length }, () => err);
    this.wakeAll();
  }

  private wakeAll(): void {
    const waiting = [...this.wake, ...this.countWake];
    this.wake = [];
    this.countWake = [];
    for (const w of waiting) w();
  }

  /** The token of the position after the latest change. */
  get head(): string {
    return `t${this.log.length}`;
  }

  /** The objects at position p, ordered by name. */
  stateAt(p: number): JsonObject[] {
    const state = new Map<string, JsonObject>();
    for (const c of this.log.slice(0, p)) {
      const name = (c.object["metadata"] as JsonObject)["name"] as string;
      if (c.type === "DELETED") state.delete(name);
      else state.set(name, c.object);
    }
    return [...state.keys()].sort().map((k) => state.get(k)!);
  }

  /** A transport to this hub; interceptors run on the client side. */
  transport(interceptors: Interceptor[] = []): Transport {
    return createRouterTransport((router) => this.routes(router), { transport: { interceptors } });
  }

  /**
   * A fetch that serves this hub at any origin, through connect-es's
   * handlers of the Connect protocol, gRPC-Web and gRPC: for code that makes
   * its own transport from fetch, such as the console.
   */
  fetch(): typeof globalThis.fetch {
    const router = createConnectRouter();
    this.routes(router);
    const handlers = new Map(router.handlers.map((h) => [h.requestPath, createFetchHandler(h)]));
    return async (input, init) => {
      const req = new Request(input, init);
      const handler = handlers.get(new URL(req.url).pathname);
      return handler === undefined ? new Response(null, { status: 404 }) : handler(req);
    };
  }

  private routes(router: ConnectRouter): void {
    router.service(InformerHubService, {
      watch: (req, ctx) => this.watch(req, ctx),
      async *snapshot() {
        throw new ConnectError("not used", Code.Unimplemented);
      },
      count: (_, ctx) => this.count(ctx),
      watchMany: (req, ctx) => this.watchMany(req, ctx),
      listResources: (_, ctx) => {
        this.authorizations.push(ctx.requestHeader.get("authorization") ?? "");
        return { resources: this.resources, maxWatchesPerStream: this.maxWatchesPerStream };
      },
    });
  }

  /**
   * WatchMany: every watch follows the one history (so each change comes
   * once per watch, in the order of the watches). Tokens: "m<n>", after the
   * n-th change; "mi<n>", the initial events at n: they are sent whole or
   * not at all (a stream that breaks inside them resumes from their start).
   */
  private async *watchMany(req: WatchManyRequest, ctx: HandlerContext): AsyncGenerator<WatchManyResponse> {
    this.manyRequests.push(req);
    const fault = this.faults.shift();
    if (fault?.kind === "refuse") throw fault.error;
    const token = req.resumeToken;
    if (token !== "" && !token.startsWith("m")) throw hubStatus(Code.InvalidArgument, "INVALID_RESUME_TOKEN", { field: "resume_token" });
    // "mi<n>": the initial events of position n, from their start.
    const initial = token.startsWith("mi") || (token === "" && req.watches.some((w) => w.sendInitialEvents));
    let position = token === "" ? this.log.length : Number(token.slice(token.startsWith("mi") ? 2 : 1));
    if (position < this.expiredBefore) throw hubStatus(Code.OutOfRange, "RESUME_TOKEN_EXPIRED", { resource: "configmaps" });
    ctx.responseHeader.set("resume-token", initial ? `mi${position}` : `m${position}`);
    let sent = 0;
    const check = (): void => {
      if (fault?.kind === "fail" && sent === fault.after) throw fault.error;
      if (fault?.kind === "end" && sent === fault.after) throw END;
    };
    const many = (index: number, event: WatchResponse, resumeToken: string, initialEventsEnd = false): WatchManyResponse => {
      sent++;
      return create(WatchManyResponseSchema, { index, event, resumeToken, initialEventsEnd });
    };
    try {
      check();
      if (initial) {
        const state = this.stateAt(position);
        const last = req.watches.length - 1;
        for (const [index] of req.watches.entries()) {
          for (const o of state) {
            yield many(index, response(EventType.ADDED, o, ""), `mi${position}`);
            check();
          }
          const end = create(WatchResponseSchema, { type: EventType.BOOKMARK, resourceVersion: String(position), initialEventsEnd: true });
          yield many(index, end, index === last ? `m${position}` : `mi${position}`, index === last);
          check();
        }
      }
      for (;;) {
        while (position < this.log.length) {
          const change = this.log[position]!;
          position++;
          for (const [index] of req.watches.entries()) {
            yield many(index, response(EventType[change.type], change.object, `t${position}`), index === req.watches.length - 1 ? `m${position}` : "");
            check();
          }
        }
        if (!(await this.nextChange(ctx))) return;
      }
    } catch (err) {
      if (err === END) return;
      throw err;
    }
  }

  /** Count: the number of objects now, then again after every change, until the client goes. */
  private async *count(ctx: HandlerContext): AsyncGenerator<{ total: bigint; resourceVersion: string }> {
    this.counts++;
    // Open until the client goes (its abort reaches the handler's signal)
    // or the stream ends.
    this.openCounts++;
    let open = true;
    const close = () => {
      if (open) this.openCounts--;
      open = false;
    };
    ctx.signal.addEventListener("abort", close, { once: true });
    // A call the client gave up on before it reached the handler.
    if (ctx.signal.aborted) close();
    try {
      for (;;) {
        yield { total: BigInt(this.stateAt(this.log.length).length), resourceVersion: String(this.log.length) };
        await new Promise<void>((resolve) => {
          this.countWake.push(resolve);
          ctx.signal.addEventListener("abort", () => resolve(), { once: true });
        });
        if (ctx.signal.aborted) return;
      }
    } finally {
      close();
    }
  }

  private async *watch(req: WatchRequest, ctx: HandlerContext): AsyncGenerator<WatchResponse> {
    this.requests.push(req);
    this.authorizations.push(ctx.requestHeader.get("authorization") ?? "");
    const fault = this.faults.shift();
    if (fault?.kind === "refuse") throw fault.error;

    // Where the stream starts: a position, and how many initial objects were sent.
    let position = this.log.length;
    let initialSent = -1; // -1: no initial events
    const token = req.resumeToken;
    if (token.startsWith("i")) {
      const [s, k] = token.slice(1).split(".").map(Number);
      position = s!;
      initialSent = k!;
    } else if (token.startsWith("t")) {
      position = Number(token.slice(1));
      if (req.sendInitialEvents) initialSent = 0;
    } else if (token !== "") {
      throw hubStatus(Code.InvalidArgument, "INVALID_RESUME_TOKEN", { field: "resume_token" });
    } else if (req.sendInitialEvents) {
      initialSent = 0;
    }
    if (position < this.expiredBefore) {
      throw hubStatus(Code.OutOfRange, "RESUME_TOKEN_EXPIRED", { resource: "configmaps" });
    }
    ctx.responseHeader.set("resume-token", initialSent >= 0 ? `i${position}.${initialSent}` : `t${position}`);

    let sent = 0;
    const send = (resp: WatchResponse): WatchResponse => {
      sent++;
      return resp;
    };
    const check = (): void => {
      if (fault?.kind === "fail" && sent === fault.after) throw fault.error;
      if (fault?.kind === "end" && sent === fault.after) throw END;
    };
    try {
      check();
      if (initialSent >= 0) {
        const initial = this.stateAt(position);
        for (let k = initialSent; k < initial.length; k++) {
          yield send(response(EventType.ADDED, initial[k]!, `i${position}.${k + 1}`));
          check();
        }
        yield send(create(WatchResponseSchema, {
          type: EventType.BOOKMARK,
          resumeToken: `t${position}`,
          resourceVersion: String(position),
          initialEventsEnd: true,
        }));
        check();
      }
      for (;;) {
        while (position < this.log.length) {
          const change = this.log[position]!;
          position++;
          const previous = change.type === "MODIFIED" && req.includePrevious ? this.previousOf(position) : undefined;
          yield send(response(EventType[change.type], change.object, `t${position}`, previous));
          check();
        }
        if (!(await this.nextChange(ctx))) return;
      }
    } catch (err) {
      if (err === END) return;
      throw err;
    }
  }

  /** The state before the change at position p (1-based) of the object it changed. */
  /**
   * Caught up, a stream waits for a change, an interruption (thrown), or
   * the client to go (false).
   */
  private async nextChange(ctx: HandlerContext): Promise<boolean> {
    await new Promise<void>((resolve) => {
      this.wake.push(resolve);
      ctx.signal.addEventListener("abort", () => resolve(), { once: true });
    });
    if (ctx.signal.aborted) return false;
    const interruption = this.interruptions.pop();
    if (interruption !== undefined) throw interruption;
    return true;
  }

  private previousOf(p: number): JsonObject | undefined {
    const name = (this.log[p - 1]!.object["metadata"] as JsonObject)["name"];
    return this.stateAt(p - 1).find((o) => (o["metadata"] as JsonObject)["name"] === name);
  }
}

const END = Symbol("end of stream");

function response(type: EventType, object: JsonObject, resumeToken: string, previous?: JsonObject): WatchResponse {
  const metadata = object["metadata"] as JsonObject;
  return create(WatchResponseSchema, {
    type,
    object: JSON.stringify(object),
    previousObject: previous === undefined ? "" : JSON.stringify(previous),
    resumeToken,
    resourceVersion: metadata["resourceVersion"] as string,
  });
}
