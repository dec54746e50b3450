// Whether a client holds what the hub holds: the digest of the objects it
// holds, as DigestResponse.digest in proto/informerhub/v1/informerhub.proto
// defines it, kept up event by event, and the Digest call that answers the
// hub's. docs/grpcurl.md#digest works an example through. The hashes come
// from WebCrypto, which is asynchronous: so are the methods that hash.

import type { Transport } from "@connectrpc/connect";
import { hubClient, selectorProto, type KubeObject, type Selector } from "./calls.js";
import type { WatchEvent } from "./watch.js";

// A digest is a sum of 128-bit hashes modulo 2^128 (a literal, so that
// bundles that do not use this module drop it).
const DIGEST_MODULUS = 0x1_0000_0000_0000_0000_0000_0000_0000_0000n;

/** The hub's digest of what a selector selects at a position (DigestResponse). */
export interface HubDigest {
  /** How many objects the selector selects there. */
  readonly count: number;
  /** 32 lowercase hexadecimal digits, as Digest's toString(). */
  readonly digest: string;
  /** The Kubernetes resourceVersion of the position digested. Informational. */
  readonly resourceVersion: string;
  /** A watch from this token continues right after the position digested. */
  readonly resumeToken: string;
  /**
   * The token asked for was older than the hub's history: the digest is of
   * the position at resumeToken instead. Compare once you have applied the
   * events up to it.
   */
  readonly moved: boolean;
}

/**
 * The hub's digest of what selector selects at resumeToken (an event's or
 * a snapshot's token of this selector; none: now), to compare with a
 * Digest of what you hold there (Digest.matches).
 */
export async function digest(
  transport: Transport,
  selector: Selector,
  options: { readonly resumeToken?: string; readonly signal?: AbortSignal } = {},
): Promise<HubDigest> {
  const request = { selector: selectorProto(selector), resumeToken: options.resumeToken ?? "" };
  const response = await hubClient(transport).digest(request, { signal: options.signal });
  return {
    // A count of objects is far below 2^53.
    count: Number(response.count),
    digest: response.digest,
    resourceVersion: response.resourceVersion,
    resumeToken: response.resumeToken,
    moved: response.moved,
  };
}

/**
 * The hash of one object in a digest, a bigint below 2^128: of its metadata
 * namespace, name, uid and resourceVersion. Rejects with a TypeError an
 * object without name, uid or resourceVersion: the hub's digest counts
 * them, so one without them could never match (a projection by fields
 * keeps them). WebCrypto's crypto.subtle computes it: browsers give it only
 * to secure contexts (https, or http on localhost).
 */
export async function objectHash(object: KubeObject): Promise<bigint> {
  const m = object.metadata;
  const parts = [m?.namespace ?? "", m?.name, m?.uid, m?.resourceVersion];
  if (!parts.every((p): p is string => typeof p === "string")) {
    throw new TypeError(`informerhub: a digest needs metadata.name, uid and resourceVersion; ${JSON.stringify(m?.name)} lacks one`);
  }
  const subtle = globalThis.crypto?.subtle;
  if (subtle === undefined) {
    throw new Error("informerhub: a digest needs WebCrypto (crypto.subtle), which browsers give only to secure contexts: https, or http on localhost");
  }
  // Each part as UTF-8 followed by one zero byte (the array starts zeroed).
  const encoder = new TextEncoder();
  const encoded = parts.map((p) => encoder.encode(p));
  const bytes = new Uint8Array(encoded.reduce((n, e) => n + e.length + 1, 0));
  let at = 0;
  for (const e of encoded) {
    bytes.set(e, at);
    at += e.length + 1;
  }
  const sha = new Uint8Array(await subtle.digest("SHA-256", bytes));
  let hash = 0n;
  for (const b of sha.subarray(0, 16)) hash = (hash << 8n) | BigInt(b);
  return hash;
}

/**
 * The digest of the objects a client holds, as the proto's
 * DigestResponse.digest defines it, and their count. Start it from a
 * snapshot's objects (Digest.of), or empty before a watch's initial events,
 * and keep it up with apply as you apply each event to what you hold; then
 * at any event's token it matches the hub's digest there (digest). Await
 * each change before the next read: hashing is asynchronous.
 */
export class Digest {
  private sum = 0n;
  private objects = 0;

  /** The digest of objects (a snapshot's). */
  static async of(objects: Iterable<KubeObject>): Promise<Digest> {
    const d = new Digest();
    for (const hash of await Promise.all([...objects].map(objectHash))) d.change(hash, 1);
    return d;
  }

  /** How many objects it holds. */
  get count(): number {
    return this.objects;
  }

  /** Adds an object now held. */
  async add(object: KubeObject): Promise<this> {
    return this.change(await objectHash(object), 1);
  }

  /** Removes an object no longer held: the state that was added, resourceVersion included. */
  async remove(object: KubeObject): Promise<this> {
    return this.change(await objectHash(object), -1);
  }

  /**
   * Applies a watch event; held is the state of the event's object you held
   * before it (undefined if none). ADDED adds the object (in place of held,
   * if given: a re-sync that replaces lists as ADDED what you may hold);
   * MODIFIED replaces held with the object; DELETED removes held, not the
   * event's object, which carries the deletion's resourceVersion rather
   * than the state's. BOOKMARKs change nothing. A MODIFIED or DELETED
   * without held rejects with a TypeError: the digest cannot be kept
   * without it. Nothing changes until every hash is computed.
   */
  async apply(event: WatchEvent, held?: KubeObject | null): Promise<this> {
    if (event.type === "BOOKMARK") return this;
    if (event.object === null) throw new TypeError(`informerhub: a ${event.type} without an object`);
    if (!held && event.type !== "ADDED") {
      throw new TypeError(`informerhub: a ${event.type} of ${JSON.stringify(event.object.metadata?.name)} needs the state held before it`);
    }
    const [before, after] = await Promise.all([
      held ? objectHash(held) : undefined,
      event.type === "DELETED" ? undefined : objectHash(event.object),
    ]);
    if (before !== undefined) this.change(before, -1);
    if (after !== undefined) this.change(after, 1);
    return this;
  }

  /** Whether it equals the hub's digest (an answer of digest): the same count and digest. */
  matches(answer: { readonly count: number | bigint; readonly digest: string }): boolean {
    return Number(answer.count) === this.objects && answer.digest === this.toString();
  }

  /** The digest as 32 lowercase hexadecimal digits, as DigestResponse.digest. */
  toString(): string {
    return this.sum.toString(16).padStart(32, "0");
  }

  private change(hash: bigint, objects: 1 | -1): this {
    this.sum = (this.sum + (objects === 1 ? hash : DIGEST_MODULUS - hash)) % DIGEST_MODULUS;
    this.objects += objects;
    return this;
  }
}
