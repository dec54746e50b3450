// A connect-es Transport to the hub that authenticates every call.

import type { Interceptor, Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";

/** How to reach the hub. */
export interface TransportOptions {
  /** The hub's address, e.g. "https://hub.example.com" or location.origin. */
  readonly baseUrl: string;
  /** A bearer token (a Kubernetes token), sent with every call. */
  readonly token?: string;
  /**
   * Returns the bearer token, called before every call (and so before every
   * reconnection of a watch): for tokens that rotate, or that the user
   * replaces. Resolving to "" sends no Authorization header.
   */
  readonly getToken?: () => string | Promise<string>;
  /** The protocol: "connect" (the default) or "grpcweb". Both stream over HTTP/1.1 and HTTP/2. */
  readonly protocol?: "connect" | "grpcweb";
  /** Protobuf's binary encoding (the default; smaller) rather than JSON. */
  readonly binary?: boolean;
  /** A fetch to use instead of globalThis.fetch (tests, proxies). */
  readonly fetch?: typeof globalThis.fetch;
  /** More interceptors, run after the one that sets the Authorization header. */
  readonly interceptors?: readonly Interceptor[];
}

/** Returns an interceptor that sets "Authorization: Bearer <token>" from getToken on every call. */
export function bearerAuth(getToken: () => string | Promise<string>): Interceptor {
  return (next) => async (req) => {
    const token = await getToken();
    if (token !== "") req.header.set("Authorization", `Bearer ${token}`);
    return next(req);
  };
}

/** Returns a Transport to the hub for the calls of this package (or a connect-es client). */
export function createTransport(options: TransportOptions): Transport {
  const { baseUrl, token, getToken, protocol = "connect", binary = true, fetch } = options;
  if (token !== undefined && getToken !== undefined) {
    throw new TypeError("informerhub: give token or getToken, not both");
  }
  const interceptors: Interceptor[] = [];
  const source = getToken ?? (token !== undefined ? () => token : undefined);
  if (source !== undefined) interceptors.push(bearerAuth(source));
  interceptors.push(...(options.interceptors ?? []));
  const common = { baseUrl, useBinaryFormat: binary, interceptors, fetch };
  switch (protocol) {
    case "connect":
      return createConnectTransport(common);
    case "grpcweb":
      return createGrpcWebTransport(common);
    default:
      throw new TypeError(`informerhub: protocol is "connect" or "grpcweb", not ${JSON.stringify(protocol)}`);
  }
}
