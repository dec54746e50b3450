// How the console shows an error: its code, reason, message, the fields it
// names, and the proto's hint of what to do.

import { hubError } from "@informerhub/web";

export interface ErrorView {
  /** "PERMISSION_DENIED". */
  readonly code: string;
  /** "FORBIDDEN"; "" without ErrorInfo. */
  readonly reason: string;
  readonly message: string;
  /** "field: description", one per BadRequest violation. */
  readonly violations: readonly string[];
  /** The ErrorInfo metadata, as "key=value", sorted; the resume token left out (the status line shows the watch's). */
  readonly metadata: readonly string[];
  /** When this happens and what to do, from the proto; "" for a status it does not list. */
  readonly hint: string;
}

export function errorView(err: unknown): ErrorView {
  const e = hubError(err);
  return {
    code: e.codeName,
    reason: e.reason,
    message: e.message,
    violations: e.violations.map((v) => `${v.field}: ${v.description}`),
    metadata: Object.keys(e.metadata)
      .filter((k) => k !== "resume_token")
      .sort()
      .map((k) => `${k}=${e.metadata[k]}`),
    hint: e.hint?.text ?? "",
  };
}

/** A short form for the status line: "UNAVAILABLE · SHUTTING_DOWN". */
export function errorSummary(err: unknown): string {
  const e = hubError(err);
  return e.reason === "" ? e.codeName : `${e.codeName} · ${e.reason}`;
}
