// The watch over a real HTTP/1.1 connection (Node's fetch), against a
// minimal server of the Connect protocol's server streaming written here:
// what a cut connection, a header-only response and an error's end-stream
// message look like to the client, byte for byte as a hub sends them.

import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import { EventType, WatchRequestSchema, WatchResponseSchema, type WatchRequest } from "../src/gen/informerhub/v1/informerhub_pb.js";
import { createTransport, hubError, watch, type WatchEvent } from "../src/index.js";

/** One enveloped message of the Connect protocol's streaming: flags, a 32-bit big-endian length, the bytes. */
function envelope(flags: number, data: Uint8Array): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt8(flags, 0);
  head.writeUInt32BE(data.length, 1);
  return Buffer.concat([head, data]);
}

function event(name: string, token: string): Buffer {
  const object = JSON.stringify({ metadata: { name, namespace: "demo", resourceVersion: token.slice(1) } });
  const resp = create(WatchResponseSchema, { type: EventType.ADDED, object, resumeToken: token, resourceVersion: token.slice(1) });
  return envelope(0, toBinary(WatchResponseSchema, resp));
}

/** The end-stream message of an error, with an ErrorInfo detail as the Connect protocol encodes it (unpadded base64). */
function endWithError(code: string, reason: string): Buffer {
  const info = toBinary(ErrorInfoSchema, create(ErrorInfoSchema, { reason, domain: "informerhub.io", metadata: { resume_token: "t6" } }));
  const details = [{ type: "google.rpc.ErrorInfo", value: Buffer.from(info).toString("base64").replace(/=+$/, "") }];
  return envelope(2, new TextEncoder().encode(JSON.stringify({ error: { code, message: `hub says ${reason}`, details } })));
}

const requests: WatchRequest[] = [];
const authorizations: string[] = [];

/** What each Watch call gets, in order: a test fills it. */
const script: ((res: ServerResponse) => void)[] = [];

const connectScript: ((res: ServerResponse) => void)[] = [
  // Headers with the stream's start, then the connection is cut before any event.
  (res) => {
    res.writeHead(200, { "content-type": "application/connect+proto", "resume-token": "t5" });
    // The headers reach the client before the connection closes (end, not
    // destroy, sends what was written first), in the middle of the body.
    res.flushHeaders();
    res.socket?.end();
  },
  // One event, then an UNAVAILABLE end-stream.
  (res) => {
    res.writeHead(200, { "content-type": "application/connect+proto", "resume-token": "t5" });
    res.write(event("a", "t6"));
    res.end(endWithError("unavailable", "SHUTTING_DOWN"));
  },
  // One event, then the connection is cut mid-message.
  (res) => {
    res.writeHead(200, { "content-type": "application/connect+proto", "resume-token": "t6" });
    res.write(event("b", "t7"));
    res.write(event("c", "t8").subarray(0, 7));
    res.socket?.end();
  },
  // PERMISSION_DENIED at the call.
  (res) => {
    res.writeHead(200, { "content-type": "application/connect+proto" });
    res.end(endWithError("permission_denied", "FORBIDDEN"));
  },
];

const server = createServer((req: IncomingMessage, res: ServerResponse) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    requests.push(fromBinary(WatchRequestSchema, body.subarray(5)));
    authorizations.push(req.headers.authorization ?? "");
    const step = script.shift();
    if (step === undefined) {
      res.writeHead(500).end();
      return;
    }
    step(res);
  });
});

let baseUrl = "";
before(async () => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => {
  server.closeAllConnections();
  server.close();
});

test("over HTTP, resumes from the header's token, after an error end-stream and after a cut mid-message; surfaces FORBIDDEN", async () => {
  script.push(...connectScript);
  requests.length = 0;
  const transport = createTransport({ baseUrl, token: "secret" });
  const w = watch(transport, { version: "v1", resource: "configmaps", namespace: "demo" }, { backoff: { initialMs: 0 } });
  const events: WatchEvent[] = [];
  await assert.rejects(
    (async () => {
      for await (const e of w) events.push(e);
    })(),
    (err) => {
      const h = hubError(err);
      assert.equal(h.code, Code.PermissionDenied);
      assert.equal(h.reason, "FORBIDDEN");
      return true;
    },
  );
  assert.deepEqual(events.map((e) => `${e.object?.metadata?.name} ${e.resumeToken}`), ["a t6", "b t7"]);
  assert.deepEqual(requests.map((r) => r.resumeToken), ["", "t5", "t6", "t7"]);
  assert.ok(authorizations.every((a) => a === "Bearer secret"));
  assert.equal(w.resumeToken, "t7");
});

test("with gRPC-Web, a call that fails before any event as trailers only still gives the stream's start token", async () => {
  requests.length = 0;
  script.push(
    (res) => {
      res.writeHead(200, { "content-type": "application/grpc-web+proto", "resume-token": "t5", "grpc-status": "14", "grpc-message": "shutting down" });
      res.end();
    },
    (res) => {
      res.writeHead(200, { "content-type": "application/grpc-web+proto", "resume-token": "t5" });
      res.write(event("a", "t6"));
      res.end(envelope(0x80, new TextEncoder().encode("grpc-status: 7\r\ngrpc-message: forbidden\r\n")));
    },
  );
  const transport = createTransport({ baseUrl, token: "secret", protocol: "grpcweb" });
  const w = watch(transport, { version: "v1", resource: "configmaps" }, { backoff: { initialMs: 0 } });
  const names: string[] = [];
  await assert.rejects(
    (async () => {
      for await (const e of w) names.push(e.object?.metadata?.name ?? "");
    })(),
    (err) => hubError(err).code === Code.PermissionDenied,
  );
  assert.deepEqual(names, ["a"]);
  assert.deepEqual(requests.map((r) => r.resumeToken), ["", "t5"]);
});
