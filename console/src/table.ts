// The table of objects a watch maintains: the objects by namespace and
// name, and how each changed lately, so the view can highlight additions,
// changes and removals for a few seconds. Pure: time is passed in, so tests
// need no clock.

import { objectKey, type KubeObject, type WatchEvent } from "@informerhub/web";

export type Highlight = "added" | "modified" | "deleted";

/** One object of the table. */
export interface Row {
  readonly key: string;
  /** Which watch the row comes from, when several share the table ("" for one). */
  readonly scope: string;
  readonly namespace: string;
  readonly name: string;
  /** Its latest state; for a deleted row, its last state. */
  object: KubeObject;
  /** Its state before the latest change, if the table knows it. */
  previous: KubeObject | null;
  resourceVersion: string;
  /** How it changed lately; null once the highlight is over. */
  highlight: Highlight | null;
  /** When the highlight ends (a deleted row then leaves the table), in ms. */
  until: number;
  /** Why the watch's filter could not decide on it, or "". */
  filterError: string;
}

export interface TableOptions {
  /** How long additions and changes stay highlighted, in ms. */
  readonly highlightMs: number;
  /** How long a deleted row stays visible, struck through, in ms. */
  readonly deletedMs: number;
}

export const DEFAULT_TABLE_OPTIONS: TableOptions = { highlightMs: 3000, deletedMs: 5000 };

export class ObjectTable {
  private readonly options: TableOptions;
  private readonly rows = new Map<string, Row>();
  /** The keys of rows, sorted: the order of the view. */
  private readonly order: string[] = [];
  /** Whether the initial events ended: changes from then on are highlighted. */
  private live = false;
  /** During a re-sync that replaces the table: the keys it listed. */
  private replacing: Set<string> | null = null;

  constructor(options: TableOptions = DEFAULT_TABLE_OPTIONS) {
    this.options = options;
  }

  /** The number of objects, without the deleted rows still shown. */
  get count(): number {
    let n = 0;
    for (const row of this.rows.values()) if (row.highlight !== "deleted") n++;
    return n;
  }

  /** Whether the initial events have ended. */
  get isLive(): boolean {
    return this.live;
  }

  get(key: string): Row | undefined {
    return this.rows.get(key);
  }

  /** The rows, sorted by namespace and name. */
  ordered(): Row[] {
    return this.order.map((k) => this.rows.get(k)!);
  }

  /** The position of key in ordered(), or where it would be. */
  indexOf(key: string): number {
    let lo = 0;
    let hi = this.order.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.order[mid]! < key) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /**
   * Applies an event; returns the keys of the rows it changed. Rows of
   * several watches share the table by scope: the key is scope then
   * namespace and name.
   */
  apply(event: WatchEvent, now: number, scope = ""): string[] {
    if (event.type === "BOOKMARK") {
      if (event.initialEventsEnd) this.live = true;
      if (event.resync && event.resyncReplaces && this.replacing !== null) {
        const listed = this.replacing;
        this.replacing = null;
        const gone = this.order.filter((k) => !listed.has(k) && this.rows.get(k)!.highlight !== "deleted");
        for (const key of gone) this.markDeleted(this.rows.get(key)!, null, "", now);
        return gone;
      }
      return [];
    }
    const meta = event.object?.metadata;
    if (event.object === null || meta === undefined || typeof meta.name !== "string") return [];
    const namespace = typeof meta.namespace === "string" ? meta.namespace : "";
    const key = scope + objectKey(namespace, meta.name);
    if (event.resync && event.resyncReplaces) (this.replacing ??= new Set()).add(key);
    const row = this.rows.get(key);
    const highlight = this.live || event.resync;
    switch (event.type) {
      case "ADDED":
      case "MODIFIED": {
        const type: Highlight = event.type === "ADDED" ? "added" : "modified";
        if (row === undefined) {
          this.insert({
            key,
            scope,
            namespace,
            name: meta.name,
            object: event.object,
            previous: event.previousObject,
            resourceVersion: event.resourceVersion,
            highlight: highlight ? type : null,
            until: now + this.options.highlightMs,
            filterError: event.filterError,
          });
        } else {
          // A row deleted a moment ago that comes back is a new object: its
          // previous state is not the deleted one's.
          const wasDeleted = row.highlight === "deleted";
          row.previous = event.previousObject ?? (wasDeleted ? null : row.object);
          row.object = event.object;
          row.resourceVersion = event.resourceVersion;
          row.filterError = event.filterError;
          row.highlight = highlight ? (wasDeleted ? "added" : type) : null;
          row.until = now + this.options.highlightMs;
        }
        return [key];
      }
      case "DELETED":
        if (row === undefined) return [];
        this.markDeleted(row, event.object, event.resourceVersion, now);
        return [key];
    }
  }

  /**
   * A re-sync's listing starts (again): only what it lists from now on
   * stays at its end. An attempt that broke, or a watch stopped during a
   * re-sync, leaves keys that no longer tell what exists.
   */
  beginResync(): void {
    this.replacing = new Set();
  }

  /** Forgets a re-sync in progress: the watch that made it stopped. */
  cancelResync(): void {
    this.replacing = null;
  }

  /** Ends the highlights that are over, and removes the deleted rows whose time is up; returns the keys changed. */
  expire(now: number): string[] {
    const changed: string[] = [];
    for (const row of this.rows.values()) {
      if (row.highlight === null || row.until > now) continue;
      if (row.highlight === "deleted") this.remove(row.key);
      else row.highlight = null;
      changed.push(row.key);
    }
    return changed;
  }

  /** Empties the table, for a new watch. */
  clear(): void {
    this.rows.clear();
    this.order.length = 0;
    this.live = false;
    this.replacing = null;
  }

  private markDeleted(row: Row, last: KubeObject | null, resourceVersion: string, now: number): void {
    if (last !== null) {
      row.previous = row.object;
      row.object = last;
    }
    if (resourceVersion !== "") row.resourceVersion = resourceVersion;
    row.highlight = "deleted";
    row.until = now + this.options.deletedMs;
  }

  private insert(row: Row): void {
    this.order.splice(this.indexOf(row.key), 0, row.key);
    this.rows.set(row.key, row);
  }

  private remove(key: string): void {
    const i = this.indexOf(key);
    if (this.order[i] === key) this.order.splice(i, 1);
    this.rows.delete(key);
  }
}
