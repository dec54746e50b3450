// A YAML emitter for Kubernetes objects (JSON values), for the detail view:
// block style, keys in the object's order, and strings quoted whenever
// they would read back as something else (true, 1, null, "", "a: b", …).
// Multi-line strings are block scalars (|, |-), as kubectl prints them.

/** value as a YAML document, ending with a new line. */
export function toYAML(value: unknown): string {
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
    lines.push(...nested);
  } else if (Array.isArray(value) && value.length > 0) {
    const nested: string[] = [];
    emit(value, indent + 2, nested);
    nested[0] = pad + "- " + nested[0]!.slice(indent + 2);
    lines.push(...nested);
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

// Plain scalars that YAML 1.1 or 1.2 would read as booleans, nulls or numbers.
const SPECIAL = /^(?:~|null|Null|NULL|true|True|TRUE|false|False|FALSE|y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF|\.inf|\.Inf|\.INF|-\.inf|-\.Inf|-\.INF|\.nan|\.NaN|\.NAN)$/;
const NUMBER = /^[-+]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$|^0x[0-9a-fA-F_]+$|^0o?[0-7_]+$|^0b[01_]+$|^[-+]?\d[\d_]*(?::[0-5]?\d)+(?:\.\d*)?$/;
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

function quoteString(s: string): string {
  if (!needsQuotes(s)) return s;
  // JSON strings are valid YAML double-quoted scalars.
  return JSON.stringify(s);
}

/** Whether s reads back from a block scalar: no characters that need escapes, no trailing spaces on lines. */
function blockable(s: string): boolean {
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029\ufeff\t]/.test(s)) return false;
  return !/ \n/.test(s) && !s.endsWith(" ") && !/^\n/.test(s);
}
