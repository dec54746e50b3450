// Small pure helpers of the view.

/** An age as kubectl shows it: "42s", "5m", "3h", "12d". */
export function formatAge(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 120) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h`;
  return `${Math.floor(h / 24)}d`;
}

/** The age of an object created at creationTimestamp (RFC 3339), or "" if it has none. */
export function ageOf(creationTimestamp: unknown, now: number): string {
  if (typeof creationTimestamp !== "string") return "";
  const created = Date.parse(creationTimestamp);
  return Number.isNaN(created) ? "" : formatAge(now - created);
}

/**
 * The paths of a fields input: separated by commas or new lines, except
 * inside brackets, where a label's name may hold a comma
 * (metadata.labels["a,b"]).
 */
export function parseFields(input: string): string[] {
  const paths: string[] = [];
  let depth = 0;
  let current = "";
  for (const c of input) {
    if (c === "[") depth++;
    if (c === "]") depth = Math.max(0, depth - 1);
    if ((c === "," || c === "\n") && depth === 0) {
      paths.push(current);
      current = "";
    } else {
      current += c;
    }
  }
  paths.push(current);
  return paths.map((p) => p.trim()).filter((p) => p !== "");
}

/** A resource type as the picker shows it: "deployments.v1.apps (Deployment)". */
export function resourceLabel(r: { group: string; version: string; resource: string; kind: string }): string {
  const name = [r.resource, r.version, r.group].filter((p) => p !== "").join(".");
  return `${name} (${r.kind})`;
}
