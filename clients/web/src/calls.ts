// The requests of InformerHubService, and its unary and snapshot calls.

import { create, type JsonObject } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client, type Transport } from "@connectrpc/connect";
import {
  InformerHubService,
  ObjectFormat,
  ResourceSelectorSchema,
  type Resource,
  type ResourceSelector,
} from "./gen/informerhub/v1/informerhub_pb.js";

/** A Kubernetes object, as the API server serves it (projected by fields). */
export type KubeObject = JsonObject & {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
};

/** The part of an object's metadata this package reads. */
export type ObjectMeta = JsonObject & {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  creationTimestamp?: string;
};

/**
 * What to watch or list: one resource type, and which of its objects. See
 * ResourceSelector in the proto for the meaning of each field.
 */
export interface Selector {
  /** The API group: "" (the default) for the core group, "apps", "example.com". */
  readonly group?: string;
  /** The API version: "v1". Required. */
  readonly version: string;
  /** The resource, plural and lower case: "configmaps". Required. */
  readonly resource: string;
  /** The namespace; "" (the default) for all namespaces. */
  readonly namespace?: string;
  /** A label selector: "app=web,tier in (front,back)". */
  readonly labelSelector?: string;
  /** A field selector: "spec.nodeName=node-1"; Resource.selectableFields lists the fields. */
  readonly fieldSelector?: string;
  /** A CEL expression over `object`: "object.status.phase == 'Running'". */
  readonly filter?: string;
}

/** How the hub sends objects; either way this package delivers plain objects. */
export type ObjectFormatName = "json" | "struct";

/** What form objects take: shared by Watch and Snapshot. */
export interface ViewOptions {
  /** Projection: the paths to keep ("status.phase", "metadata.labels"); empty keeps everything. */
  readonly fields?: readonly string[];
  /** "json" (the default: the API server's bytes, cheapest to decode) or "struct" (google.protobuf.Struct). */
  readonly objectFormat?: ObjectFormatName;
}

export function selectorProto(selector: Selector): ResourceSelector {
  if (!selector.version || !selector.resource) {
    throw new TypeError('informerhub: a selector needs version and resource, e.g. { version: "v1", resource: "configmaps" }');
  }
  return create(ResourceSelectorSchema, {
    group: selector.group ?? "",
    version: selector.version,
    resource: selector.resource,
    namespace: selector.namespace ?? "",
    labelSelector: selector.labelSelector ?? "",
    fieldSelector: selector.fieldSelector ?? "",
    filter: selector.filter ?? "",
  });
}

export function objectFormatProto(format: ObjectFormatName = "json"): ObjectFormat {
  switch (format) {
    case "json":
      return ObjectFormat.UNSPECIFIED;
    case "struct":
      return ObjectFormat.STRUCT;
    default:
      throw new TypeError(`informerhub: objectFormat is "json" or "struct", not ${JSON.stringify(format)}`);
  }
}

/** An object of a response: its Struct if the hub sent one, else its JSON; null if neither. */
export function objectOf(json: string, struct: JsonObject | undefined): KubeObject | null {
  if (struct !== undefined) return struct;
  return json === "" ? null : (JSON.parse(json) as KubeObject);
}

const clients = new WeakMap<Transport, Client<typeof InformerHubService>>();

/** The connect-es client of the service on transport, made once per transport. */
export function hubClient(transport: Transport): Client<typeof InformerHubService> {
  let client = clients.get(transport);
  if (client === undefined) {
    client = createClient(InformerHubService, transport);
    clients.set(transport, client);
  }
  return client;
}

/**
 * The resource types the caller may list and watch in namespace ("":
 * cluster-wide), ordered by group, version and resource.
 */
export async function listResources(
  transport: Transport,
  namespace = "",
  options: { readonly signal?: AbortSignal } = {},
): Promise<Resource[]> {
  const response = await hubClient(transport).listResources({ namespace }, { signal: options.signal });
  return response.resources;
}

/** Every object a selector matched at one point in time, and the token to watch on from. */
export interface Snapshot {
  /** The objects, ordered by namespace and name. */
  readonly objects: KubeObject[];
  /**
   * Parallel to objects: why the filter could not decide on each ("" where
   * it did). Empty when it decided on every object.
   */
  readonly filterErrors: string[];
  /** A watch from this token yields exactly the changes after the snapshot. */
  readonly resumeToken: string;
  /** The resourceVersion of the snapshot. Informational. */
  readonly resourceVersion: string;
}

/** Reads a whole Snapshot: every page, up to the last. */
export async function snapshot(
  transport: Transport,
  selector: Selector,
  options: ViewOptions & { readonly signal?: AbortSignal } = {},
): Promise<Snapshot> {
  const request = {
    selector: selectorProto(selector),
    fields: [...(options.fields ?? [])],
    objectFormat: objectFormatProto(options.objectFormat),
  };
  const objects: KubeObject[] = [];
  const filterErrors: string[] = [];
  for await (const page of hubClient(transport).snapshot(request, { signal: options.signal })) {
    const before = objects.length;
    for (const o of page.objects) objects.push(JSON.parse(o) as KubeObject);
    objects.push(...page.objectStructs);
    // filter_errors is empty on pages where the filter decided on every
    // object: pad, so that the result stays parallel to objects.
    if (page.filterErrors.length > 0 || filterErrors.length > 0) {
      while (filterErrors.length < before) filterErrors.push("");
      if (page.filterErrors.length > 0) filterErrors.push(...page.filterErrors);
      else while (filterErrors.length < objects.length) filterErrors.push("");
    }
    if (page.last) {
      return { objects, filterErrors, resumeToken: page.resumeToken, resourceVersion: page.resourceVersion };
    }
  }
  throw new ConnectError("informerhub: the snapshot ended before its last page", Code.Unavailable);
}
