// A YAML emitter for Kubernetes objects (JSON values), for the detail view:
// block style, keys in the object's order, and strings quoted whenever
// they would read back as something else (true, 1, null, "", "a: b", …).
// Multi-line strings are block scalars (|, |-), as kubectl prints them.

/**
 * The most levels of nesting, and values, a view writes out. The API server
 * accepts objects nested 10000 levels deep; recursion that deep overflows a
 * page's stack, and a million values make a text no one reads.
 */
export const MAX_YAML_DEPTH = 200;
export const MAX_JSON_DEPTH = 1000;
export const MAX_VALUES = 200_000;

/**
 * Why value is too deep or too large to write out, or "" if it is not:
 * found without recursion, so that it holds for any value.
 */
export function tooBig(value: unknown, maxDepth: number, maxValues = MAX_VALUES): string {
  const stack: [unknown, number][] = [[value, 0]];
  let values = 0;
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (++values > maxValues) return `more than ${maxValues} values`;
    if (v === null || typeof v !== "object") continue;
    if (depth >= maxDepth) return `nested more than ${maxDepth} levels deep`;
    const children = Array.isArray(v) ? v : Object.values(v as Record<string, unknown>);
    for (const c of children) stack.push([c, depth + 1]);
  }
  return "";
}

/** value as a YAML document, ending with a new line; or a comment saying why not, for a value too deep or too large. */
export function toYAML(value: unknown): string {
  const why = tooBig(value, MAX_YAML_DEPTH);
  if (why !== "") return `# The object is too deep or too large to show as YAML (${why}); see the JSON view.\n`;
  const lines: string[] = [];
  emit(value, 0, lines);
  return lines.join("\n") + "\n";
}

function emit(value: unknown, indent: number, lines: string[]): void {
  const pad = " ".repeat(indent);
  if (Array.isArray(value)) {
    if (value.length === 0) {
      lines.push(pad + "[]");
      return;
    }
    for (const item of value) item_(item, indent, lines);
    return;
  }
  if (isObject(value)) {
    const keys = Object.keys(value);
    if (keys.length === 0) {
      lines.push(pad + "{}");
      return;
    }
    for (const k of keys) entry(k, value[k], indent, lines);
    return;
  }
  lines.push(pad + scalar(value, indent));
}

/** key: value, in a mapping at indent. */
function entry(key: string, value: unknown, indent: number, lines: string[]): void {
  const head = " ".repeat(indent) + quoteString(key) + ":";
  if (Array.isArray(value) && value.length > 0) {
    // kubectl's style: a sequence in a mapping is not indented further.
    lines.push(head);
    for (const item of value) item_(item, indent, lines);
  } else if (isObject(value) && Object.keys(value).length > 0) {
    lines.push(head);
    emit(value, indent + 2, lines);
  } else {
    pushScalar(head, value, indent + 2, lines);
  }
}

/** - value, in a sequence at indent. */
function item_(value: unknown, indent: number, lines: string[]): void {
  const pad = " ".repeat(indent);
  if (isObject(value) && Object.keys(value).length > 0) {
    // The first key on the dash's line, the rest under it.
    const nested: string[] = [];
    emit(value, indent + 2, nested);
    nested[0] = pad + "- " + nested[0]!.slice(indent + 2);
    for (const l of nested) lines.push(l);
  } else if (Array.isArray(value) && value.length > 0) {
    const nested: string[] = [];
    emit(value, indent + 2, nested);
    nested[0] = pad + "- " + nested[0]!.slice(indent + 2);
    for (const l of nested) lines.push(l);
  } else {
    pushScalar(pad + "-", value, indent + 2, lines);
  }
}

/** head followed by a scalar (or an empty collection), a block scalar's lines at indent. */
function pushScalar(head: string, value: unknown, indent: number, lines: string[]): void {
  if (typeof value === "string" && value.includes("\n") && blockable(value)) {
    const chomp = value.endsWith("\n") ? (value.endsWith("\n\n") ? "+" : "") : "-";
    // A leading space would be read as the block's indentation: give it.
    const indicator = value.startsWith(" ") ? "2" : "";
    lines.push(`${head} |${indicator}${chomp}`);
    const body = chomp === "" ? value.slice(0, -1) : chomp === "+" ? value.slice(0, -1) : value;
    for (const l of body.split("\n")) lines.push(l === "" ? "" : " ".repeat(indent) + l);
    return;
  }
  if (Array.isArray(value)) lines.push(`${head} []`);
  else if (isObject(value)) lines.push(`${head} {}`);
  else lines.push(`${head} ${scalar(value, indent)}`);
}

function scalar(value: unknown, _indent: number): string {
  if (value === null || value === undefined) return "null";
  if (typeof value === "boolean" || typeof value === "number") return String(value);
  if (typeof value === "string") return quoteString(value);
  return quoteString(JSON.stringify(value));
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

// Plain scalars that YAML 1.1 or 1.2 would read as booleans, nulls,
// numbers, infinities, NaN, the merge key (<<) or the value key (=), in any
// case (quoting more than needed is harmless; less is not).
const SPECIAL = /^(?:~|null|true|false|y|n|yes|no|on|off|[-+]?\.inf|\.nan|<<|=)$/i;
const NUMBER = /^[-+]?(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][-+]?\d+)?$|^[-+]?0[xX][0-9a-fA-F_]+$|^[-+]?0[oO]?[0-7_]+$|^[-+]?0[bB][01_]+$|^[-+]?\d[\d_]*(?::[0-5]?\d)+(?:\.[\d_]*)?$/;
const TIMESTAMP = /^\d{4}-\d\d?-\d\d?(?:[Tt ]|$)/;

/** Whether s must be quoted to read back as the same string. */
export function needsQuotes(s: string): boolean {
  if (s === "") return true;
  if (SPECIAL.test(s) || NUMBER.test(s) || TIMESTAMP.test(s)) return true;
  if (/^[\s]|[\s]$/.test(s)) return true;
  // Indicators that may not start a plain scalar.
  if (/^[-?:,[\]{}#&*!|>'"%@`]/.test(s)) {
    // "-x", "?x", ":x" are plain if followed by a non-space; keep it simple and quote.
    return true;
  }
  if (s.includes(": ") || s.endsWith(":") || s.includes(" #")) return true;
  // Control characters, and anything not printable, need escapes.
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f-\u009f\u2028\u2029\ufeff]/.test(s)) return true;
  return false;
}

// Characters JSON.stringify leaves as they are but a YAML reader does not:
// DEL and the C1 controls (U+0085 is a line break in YAML 1.1), the line
// and paragraph separators, and the byte order mark.
// eslint-disable-next-line no-control-regex
const UNSAFE = /[\u007f-\u009f\u2028\u2029\ufeff]/g;

function quoteString(s: string): string {
  if (!needsQuotes(s)) return s;
  // JSON strings are YAML double-quoted scalars, once the characters YAML
  // reads otherwise are escaped too.
  return JSON.stringify(s).replace(UNSAFE, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
}

/** Whether s reads back from a block scalar: no characters that need escapes, no trailing spaces on lines. */
function blockable(s: string): boolean {
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029\ufeff\t]/.test(s)) return false;
  return !/ \n/.test(s) && !s.endsWith(" ") && !/^\n/.test(s);
}
