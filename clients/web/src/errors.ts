// What the hub says about an error: the google.rpc.ErrorInfo and
// google.rpc.BadRequest details of a ConnectError, and the proto's hint for
// its code and reason.

import { Code, ConnectError } from "@connectrpc/connect";
import { BadRequestSchema, ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { statusHints, type StatusHint } from "./gen/informerhub/v1/informerhub_hints.js";

/** The ErrorInfo domain of the statuses the hub makes itself. */
export const ERROR_DOMAIN = "informerhub.io";

/** One field of a request the hub refused, from google.rpc.BadRequest. */
export interface FieldViolation {
  readonly field: string;
  readonly description: string;
}

/** An error of a call, as the hub describes it. */
export interface HubError {
  /** The status code. */
  readonly code: Code;
  /** The code as the proto and gRPC name it: "PERMISSION_DENIED". */
  readonly codeName: string;
  /** The message, without the code connect-es prefixes to Error.message. */
  readonly message: string;
  /** The ErrorInfo reason ("FORBIDDEN", "RESUME_TOKEN_EXPIRED", …); "" without ErrorInfo (a status from the transport or middleware). */
  readonly reason: string;
  /** The ErrorInfo domain: "informerhub.io" for the hub's own statuses. */
  readonly domain: string;
  /** The ErrorInfo metadata: "resource", "namespace", "user", "resume_token", "limit", … */
  readonly metadata: Readonly<Record<string, string>>;
  /** The BadRequest field violations, if any. */
  readonly violations: readonly FieldViolation[];
  /** What the proto says this status means and what to do; undefined for a status it does not list. */
  readonly hint: StatusHint | undefined;
}

/** The name of a code as the proto writes it: Code.PermissionDenied is "PERMISSION_DENIED". */
export function codeName(code: Code): string {
  return (Code[code] ?? "UNKNOWN").replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

/**
 * The proto's entry for a status: the one listing its code and reason, or,
 * for a reason it does not list (or none), the one listing its code without
 * a reason.
 */
export function hintFor(code: Code, reason: string): StatusHint | undefined {
  const name = codeName(code);
  const ofCode = statusHints.filter((h) => h.codes.includes(name));
  return ofCode.find((h) => h.reason === reason && reason !== "") ?? ofCode.find((h) => h.reason === "");
}

/**
 * Describes any error a call of this package throws. Errors that are not
 * ConnectErrors (a bug, a rejected fetch) are described as connect-es
 * describes them: code Unknown.
 */
export function hubError(err: unknown): HubError {
  const ce = ConnectError.from(err);
  const info = ce.findDetails(ErrorInfoSchema)[0];
  const violations = ce
    .findDetails(BadRequestSchema)
    .flatMap((b) => b.fieldViolations.map(({ field, description }) => ({ field, description })));
  const reason = info?.reason ?? "";
  return {
    code: ce.code,
    codeName: codeName(ce.code),
    message: ce.rawMessage,
    reason,
    domain: info?.domain ?? "",
    metadata: { ...info?.metadata },
    violations,
    hint: hintFor(ce.code, reason),
  };
}

/** The ErrorInfo reason of err, or "". */
export function errorReason(err: unknown): string {
  return err instanceof ConnectError ? (err.findDetails(ErrorInfoSchema)[0]?.reason ?? "") : "";
}
