// @informerhub/web: a client of informerhub for browsers and Node.js, on
// connect-es. See README.md; the contract is proto/informerhub/v1/informerhub.proto.

export { createTransport, bearerAuth, type TransportOptions } from "./transport.js";
export {
  listResources,
  snapshot,
  hubClient,
  selectorProto,
  type KubeObject,
  type ObjectMeta,
  type ObjectFormatName,
  type Selector,
  type Snapshot,
  type ViewOptions,
} from "./calls.js";
export {
  watch,
  ResumingWatch,
  DEFAULT_BACKOFF,
  RESUME_TOKEN_HEADER,
  canonicalJSON,
  objectKey,
  type Backoff,
  type EventTypeName,
  type WatchEvent,
  type WatchOptions,
} from "./watch.js";
export { Digest, digest, objectHash, type HubDigest } from "./digest.js";
export { hubError, hintFor, codeName, errorReason, ERROR_DOMAIN, type HubError, type FieldViolation } from "./errors.js";
export { statusHints, type StatusHint } from "./gen/informerhub/v1/informerhub_hints.js";
export type { Resource } from "./gen/informerhub/v1/informerhub_pb.js";
// Re-exported so that an application needs no copy of its own of connect-es
// (one copy in a bundle; instanceof ConnectError holds).
export { Code, ConnectError } from "@connectrpc/connect";
