// A line diff of two objects' JSON, for the detail of a selected row.

import { MAX_JSON_DEPTH, tooBig } from "./yaml.js";

export interface DiffLine {
  /** " " unchanged, "-" only in the old text, "+" only in the new one. */
  readonly op: " " | "-" | "+";
  readonly text: string;
}

// Beyond this many cells the longest-common-subsequence table is too big
// to compute on every change of a selected object (a page has about 16 ms
// a frame): the middle is then shown as replaced. 250000 cells: two
// changed runs of 500 lines, a few milliseconds.
export const MAX_CELLS = 250_000;

/** The lines of before and after, aligned by their longest common subsequence. */
export function lineDiff(before: string, after: string): DiffLine[] {
  const a = before === "" ? [] : before.split("\n");
  const b = after === "" ? [] : after.split("\n");
  // Changes are usually small: the common head and tail need no table.
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail++;
  const same = (lines: string[]): DiffLine[] => lines.map((text) => ({ op: " ", text }));
  const midA = a.slice(head, a.length - tail);
  const midB = b.slice(head, b.length - tail);
  return [...same(a.slice(0, head)), ...middle(midA, midB), ...same(a.slice(a.length - tail))];
}

function middle(a: string[], b: string[]): DiffLine[] {
  if (a.length * b.length > MAX_CELLS) {
    return [...a.map((text): DiffLine => ({ op: "-", text })), ...b.map((text): DiffLine => ({ op: "+", text }))];
  }
  // lcs[i][j]: the length of the longest common subsequence of a[i:] and b[j:].
  const width = b.length + 1;
  const lcs = new Uint32Array((a.length + 1) * width);
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      lcs[i * width + j] = a[i] === b[j] ? lcs[(i + 1) * width + j + 1]! + 1 : Math.max(lcs[(i + 1) * width + j]!, lcs[i * width + j + 1]!);
    }
  }
  const out: DiffLine[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) {
      out.push({ op: " ", text: a[i]! });
      i++;
      j++;
    } else if (lcs[(i + 1) * width + j]! >= lcs[i * width + j + 1]!) {
      out.push({ op: "-", text: a[i++]! });
    } else {
      out.push({ op: "+", text: b[j++]! });
    }
  }
  while (i < a.length) out.push({ op: "-", text: a[i++]! });
  while (j < b.length) out.push({ op: "+", text: b[j++]! });
  return out;
}

/** An object as the detail shows it: indented JSON; or why not, for an object too deep or too large. */
export function pretty(object: unknown): string {
  const why = tooBig(object, MAX_JSON_DEPTH);
  if (why !== "") return `// The object is too deep or too large to show (${why}).`;
  return JSON.stringify(object, null, 2);
}

/** A line of a change as the detail shows it: a diff line, or a run of unchanged lines left out. */
export type ChangeLine = DiffLine | { readonly op: "…"; readonly text: string; readonly skipped: number };

/** A change between two states, with the bookkeeping folded away. */
export interface Change {
  /** The changed lines with `context` unchanged lines around each run; the rest summarized. */
  readonly lines: ChangeLine[];
  /** How many changed lines were only bookkeeping (managedFields, resourceVersion, generation), left out. */
  readonly folded: number;
  /** Whether anything but bookkeeping changed. */
  readonly changed: boolean;
}

/**
 * The fields every write changes, which a person rarely looks for: without
 * them a one-line data change is one line. metadata.managedFields holds the
 * time of each manager's last write.
 */
export function withoutBookkeeping(object: unknown): unknown {
  if (object === null || typeof object !== "object" || Array.isArray(object)) return object;
  const o = object as Record<string, unknown>;
  const meta = o["metadata"];
  if (meta === null || typeof meta !== "object" || Array.isArray(meta)) return object;
  const { managedFields: _m, resourceVersion: _r, generation: _g, ...rest } = meta as Record<string, unknown>;
  return { ...o, metadata: rest };
}

/** An object without metadata.managedFields, for the default view. */
export function withoutManagedFields(object: unknown): unknown {
  if (object === null || typeof object !== "object" || Array.isArray(object)) return object;
  const o = object as Record<string, unknown>;
  const meta = o["metadata"];
  if (meta === null || typeof meta !== "object" || Array.isArray(meta) || !("managedFields" in meta)) return object;
  const { managedFields: _m, ...rest } = meta as Record<string, unknown>;
  return { ...o, metadata: rest };
}

const changes = (lines: DiffLine[]): number => lines.filter((l) => l.op !== " ").length;

/**
 * The change from before to after, in text as render makes it (YAML, say):
 * what changed first, with `context` lines around it, and the bookkeeping
 * fields' changes folded away and counted.
 */
export function changeOf(before: unknown, after: unknown, render: (o: unknown) => string, context = 3): Change {
  const text = (o: unknown) => render(o).replace(/\n$/, "");
  const all = changes(lineDiff(text(before), text(after)));
  const diff = lineDiff(text(withoutBookkeeping(before)), text(withoutBookkeeping(after)));
  const shown = changes(diff);
  const keep = new Array<boolean>(diff.length).fill(false);
  diff.forEach((l, i) => {
    if (l.op === " ") return;
    for (let j = Math.max(0, i - context); j <= Math.min(diff.length - 1, i + context); j++) keep[j] = true;
  });
  const lines: ChangeLine[] = [];
  let skipped = 0;
  const flush = () => {
    if (skipped > 0) lines.push({ op: "…", text: `${skipped} unchanged line${skipped === 1 ? "" : "s"}`, skipped });
    skipped = 0;
  };
  diff.forEach((l, i) => {
    if (keep[i]) {
      flush();
      lines.push(l);
    } else {
      skipped++;
    }
  });
  flush();
  return { lines, folded: Math.max(0, all - shown), changed: shown > 0 };
}
