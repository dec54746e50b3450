// A small evaluator of the JSONPath subset CRDs' additionalPrinterColumns
// use (kubectl's jsonpath without braces): `.a.b`, `['a.b']`, `["x"]`,
// `[0]`, `[-1]`, `[*]`, `.*`, and the filters CRDs' Ready columns use,
// `[?(@.type=="Ready")]` (== and != against a quoted string, a number,
// true or false). Anything else is reported, never run: the paths come
// from CRDs, which tenants may write.

/** One step of a path. */
type Step =
  | { readonly kind: "key"; readonly key: string }
  | { readonly kind: "index"; readonly index: number }
  | { readonly kind: "all" }
  | { readonly kind: "filter"; readonly path: readonly Step[]; readonly op: "==" | "!="; readonly literal: string | number | boolean };

/** A filter's operand: `@` and a path, an operator, and a literal. */
const FILTER = /^@((?:\.[A-Za-z0-9_\-/]+|\[\s*'[^']*'\s*\]|\[\s*"[^"]*"\s*\]|\[\s*-?\d+\s*\])*)\s*(==|!=)\s*("[^"]*"|'[^']*'|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false)$/;

/** The end of a filter starting at p[i] === "[": the index after its "]", or -1. */
function filterEnd(p: string, i: number): number {
  let quote = "";
  for (let j = i + 3; j < p.length; j++) {
    const c = p[j];
    if (quote !== "") {
      if (c === quote) quote = "";
    } else if (c === '"' || c === "'") {
      quote = c;
    } else if (c === ")" && p[j + 1] === "]") {
      return j + 2;
    }
  }
  return -1;
}

/** A parsed path, or the reason it is not one this evaluator reads. */
export type Path = { readonly steps: readonly Step[] } | { readonly error: string };

/** Parses a path such as `.status.conditions[0].type`; never throws. */
export function parsePath(path: string): Path {
  let p = path.trim();
  // kubectl accepts {.a.b} too.
  if (p.startsWith("{") && p.endsWith("}")) p = p.slice(1, -1).trim();
  if (p.startsWith("$")) p = p.slice(1);
  const steps: Step[] = [];
  let i = 0;
  const error = (why: string): Path => ({ error: `${why} at ${i} of ${JSON.stringify(path)}` });
  while (i < p.length) {
    const c = p[i];
    if (c === ".") {
      i++;
      if (p[i] === "*") {
        steps.push({ kind: "all" });
        i++;
        continue;
      }
      const m = /^[A-Za-z0-9_\-/]+/.exec(p.slice(i));
      if (m === null) return error("a name expected");
      steps.push({ kind: "key", key: m[0] });
      i += m[0].length;
    } else if (c === "[" && p.startsWith("[?(", i)) {
      const end = filterEnd(p, i);
      if (end < 0) return error("a filter without its end ')]'");
      const m = FILTER.exec(p.slice(i + 3, end - 2).trim());
      if (m === null) return error("a filter of the form @.a.b == 'value' expected");
      const sub = m[1] === "" ? { steps: [] } : parsePath(m[1]!);
      if ("error" in sub) return error(`in the filter, ${sub.error}`);
      const lit = m[3]!;
      const literal = lit.startsWith('"') || lit.startsWith("'") ? lit.slice(1, -1) : lit === "true" ? true : lit === "false" ? false : Number(lit);
      steps.push({ kind: "filter", path: sub.steps, op: m[2] as "==" | "!=", literal });
      i = end;
    } else if (c === "[") {
      const rest = p.slice(i);
      let m: RegExpExecArray | null;
      if ((m = /^\[\s*\*\s*\]/.exec(rest)) !== null) steps.push({ kind: "all" });
      else if ((m = /^\[\s*(-?\d+)\s*\]/.exec(rest)) !== null) steps.push({ kind: "index", index: Number(m[1]) });
      else if ((m = /^\[\s*'([^']*)'\s*\]/.exec(rest)) !== null) steps.push({ kind: "key", key: m[1]! });
      else if ((m = /^\[\s*"([^"]*)"\s*\]/.exec(rest)) !== null) steps.push({ kind: "key", key: m[1]! });
      else return error("an index, '*' or a quoted name expected");
      i += m[0].length;
    } else {
      return error(`unexpected ${JSON.stringify(c)}`);
    }
  }
  if (steps.length === 0) return { error: `an empty path: ${JSON.stringify(path)}` };
  return { steps };
}

/**
 * The values at path in value: none, one, or several (through `[*]` or a
 * filter); at most limit of them.
 */
export function evaluate(path: Path, value: unknown, limit = Infinity): unknown[] {
  if ("error" in path) return [];
  const values = walk(path.steps, value);
  return values.length > limit ? values.slice(0, limit) : values;
}

function walk(steps: readonly Step[], value: unknown): unknown[] {
  let current: unknown[] = [value];
  for (const step of steps) {
    const next: unknown[] = [];
    for (const v of current) {
      if (v === null || typeof v !== "object") continue;
      switch (step.kind) {
        case "key":
          if (!Array.isArray(v) && Object.hasOwn(v, step.key)) next.push((v as Record<string, unknown>)[step.key]);
          break;
        case "index":
          if (Array.isArray(v)) {
            const at = step.index < 0 ? v.length + step.index : step.index;
            if (at >= 0 && at < v.length) next.push(v[at]);
          }
          break;
        case "all":
          // One at a time: a spread of a big array overflows the stack.
          for (const x of Array.isArray(v) ? v : Object.values(v)) next.push(x);
          break;
        case "filter":
          // As kubectl's jsonpath: over an array's items (or an object's
          // values), those whose path has one value that compares so; an
          // item without the path is left out, for != too.
          for (const x of Array.isArray(v) ? v : Object.values(v)) {
            const left = walk(step.path, x);
            if (left.length !== 1) continue;
            if ((left[0] === step.literal) === (step.op === "==")) next.push(x);
          }
          break;
      }
    }
    current = next;
  }
  return current;
}
