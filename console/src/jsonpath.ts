// A small evaluator of the JSONPath subset CRDs' additionalPrinterColumns
// use (kubectl's jsonpath without braces): `.a.b`, `['a.b']`, `["x"]`,
// `[0]`, `[-1]`, `[*]` and `.*`. Anything else is reported, never run:
// the paths come from CRDs, which tenants may write.

/** One step of a path. */
type Step = { readonly kind: "key"; readonly key: string } | { readonly kind: "index"; readonly index: number } | { readonly kind: "all" };

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

/** The values at path in value: none, one, or several (through `[*]`). */
export function evaluate(path: Path, value: unknown): unknown[] {
  if ("error" in path) return [];
  let current: unknown[] = [value];
  for (const step of path.steps) {
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
          next.push(...(Array.isArray(v) ? v : Object.values(v)));
          break;
      }
    }
    current = next;
  }
  return current;
}
