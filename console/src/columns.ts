// The columns of the objects' table, per resource type, as kubectl get
// shows them: its printers' columns for built-in types, and a CRD's
// additionalPrinterColumns (priority 0) for custom resources. Pure: time is
// passed in. Values are plain strings, for textContent.

import type { KubeObject } from "@informerhub/web";
import { evaluate, parsePath } from "./jsonpath.js";
import { ageOf, formatAge } from "./format.js";

/** One column beyond namespace and name. */
export interface Column {
  readonly name: string;
  /** What the column shows, for a tooltip; may be "". */
  readonly description: string;
  readonly value: (object: KubeObject, now: number) => string;
  /** Whether the value changes with time alone (an age): the 1-second tick recomputes only these. */
  readonly timed: boolean;
}

/** What columns need of a resource type (a Resource of the proto has it all). */
export interface ResourceType {
  readonly group: string;
  readonly resource: string;
  readonly printerColumns: readonly {
    readonly name: string;
    readonly type: string;
    readonly description: string;
    readonly priority: number;
    readonly jsonPath: string;
  }[];
}

type J = Record<string, unknown>;

const obj = (v: unknown): J => (v !== null && typeof v === "object" && !Array.isArray(v) ? (v as J) : {});
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const str = (v: unknown): string => (typeof v === "string" ? v : typeof v === "number" || typeof v === "boolean" ? String(v) : "");
const num = (v: unknown): number => (typeof v === "number" ? v : 0);
const orNone = (s: string): string => (s === "" ? "<none>" : s);
const spec = (o: KubeObject): J => obj(o["spec"]);
const status = (o: KubeObject): J => obj(o["status"]);

/** The age of an object, kubectl's last column of most types. */
export const AGE: Column = { name: "Age", description: "time since creation", value: (o, now) => ageOf(o.metadata?.creationTimestamp, now), timed: true };

function col(name: string, value: (o: KubeObject) => string, description = ""): Column {
  return { name, description, value, timed: false };
}

/** A column whose value moves on with time: a duration up to now. */
function timedCol(name: string, value: (o: KubeObject, now: number) => string, description = ""): Column {
  return { name, description, value, timed: true };
}

/** A pod's Status as kubectl computes it: waiting and terminated reasons, Init:…, Terminating. */
export function podStatus(pod: KubeObject): string {
  const st = status(pod);
  let reason = str(st["phase"]);
  if (str(st["reason"]) !== "") reason = str(st["reason"]);
  const initStatuses = arr(st["initContainerStatuses"]).map(obj);
  const initCount = arr(spec(pod)["initContainers"]).length;
  let initializing = false;
  for (const [i, c] of initStatuses.entries()) {
    const terminated = obj(obj(c["state"])["terminated"]);
    const waiting = obj(obj(c["state"])["waiting"]);
    if (Object.keys(terminated).length > 0 && num(terminated["exitCode"]) === 0) continue;
    // A restartable init container (a sidecar) that started does not hold the pod.
    if (spec(pod)["initContainers"] !== undefined && obj(arr(spec(pod)["initContainers"])[i])["restartPolicy"] === "Always" && c["started"] === true) continue;
    if (Object.keys(terminated).length > 0) {
      reason = str(terminated["reason"]) !== ""
        ? `Init:${str(terminated["reason"])}`
        : num(terminated["signal"]) !== 0 ? `Init:Signal:${num(terminated["signal"])}` : `Init:ExitCode:${num(terminated["exitCode"])}`;
    } else if (str(waiting["reason"]) !== "" && waiting["reason"] !== "PodInitializing") {
      reason = `Init:${str(waiting["reason"])}`;
    } else {
      reason = `Init:${i}/${initCount}`;
    }
    initializing = true;
    break;
  }
  if (!initializing) {
    let hasRunning = false;
    const statuses = arr(st["containerStatuses"]).map(obj);
    for (const c of [...statuses].reverse()) {
      const state = obj(c["state"]);
      const waiting = obj(state["waiting"]);
      const terminated = obj(state["terminated"]);
      if (str(waiting["reason"]) !== "") reason = str(waiting["reason"]);
      else if (str(terminated["reason"]) !== "") reason = str(terminated["reason"]);
      else if (Object.keys(terminated).length > 0) {
        reason = num(terminated["signal"]) !== 0 ? `Signal:${num(terminated["signal"])}` : `ExitCode:${num(terminated["exitCode"])}`;
      } else if (c["ready"] === true && state["running"] !== undefined) hasRunning = true;
    }
    if (reason === "Completed" && hasRunning) {
      const ready = arr(st["conditions"]).map(obj).some((c) => c["type"] === "Ready" && c["status"] === "True");
      reason = ready ? "Running" : "NotReady";
    }
  }
  if (pod.metadata?.["deletionTimestamp"] !== undefined) reason = str(st["reason"]) === "NodeLost" ? "Unknown" : "Terminating";
  return reason;
}

function podReady(pod: KubeObject): string {
  const total = arr(spec(pod)["containers"]).length;
  const ready = arr(status(pod)["containerStatuses"]).map(obj).filter((c) => c["ready"] === true).length;
  return `${ready}/${total}`;
}

function podRestarts(pod: KubeObject, now: number): string {
  let restarts = 0;
  let last = 0;
  for (const c of arr(status(pod)["containerStatuses"]).map(obj)) {
    restarts += num(c["restartCount"]);
    const finished = Date.parse(str(obj(obj(c["lastState"])["terminated"])["finishedAt"]));
    if (!Number.isNaN(finished)) last = Math.max(last, finished);
  }
  return restarts > 0 && last > 0 ? `${restarts} (${formatAge(now - last)} ago)` : String(restarts);
}

function nodeStatus(node: KubeObject): string {
  const ready = arr(status(node)["conditions"]).map(obj).find((c) => c["type"] === "Ready");
  const out = [ready === undefined ? "Unknown" : ready["status"] === "True" ? "Ready" : "NotReady"];
  if (spec(node)["unschedulable"] === true) out.push("SchedulingDisabled");
  return out.join(",");
}

function nodeRoles(node: KubeObject): string {
  const labels = obj(node.metadata?.["labels"]);
  const roles = Object.keys(labels)
    .filter((k) => k.startsWith("node-role.kubernetes.io/"))
    .map((k) => k.slice("node-role.kubernetes.io/".length))
    .filter((r) => r !== "");
  if (typeof labels["kubernetes.io/role"] === "string") roles.push(labels["kubernetes.io/role"]);
  return orNone(roles.sort().join(","));
}

function servicePorts(svc: KubeObject): string {
  return orNone(
    arr(spec(svc)["ports"])
      .map(obj)
      .map((p) => `${num(p["port"])}${p["nodePort"] !== undefined ? `:${num(p["nodePort"])}` : ""}/${str(p["protocol"]) || "TCP"}`)
      .join(","),
  );
}

function serviceExternalIP(svc: KubeObject): string {
  const type = str(spec(svc)["type"]);
  const ingress = arr(obj(status(svc)["loadBalancer"])["ingress"]).map(obj).map((i) => str(i["ip"]) || str(i["hostname"]));
  const external = arr(spec(svc)["externalIPs"]).map(str);
  if (type === "ExternalName") return str(spec(svc)["externalName"]);
  if (type === "LoadBalancer") return [...ingress, ...external].join(",") || "<pending>";
  return orNone(external.join(","));
}

const dataCount = (o: KubeObject): string => String(Object.keys(obj(o["data"])).length + Object.keys(obj(o["binaryData"])).length);
// A Map: a plain object would find "constructor" and the like in its prototype.
const ACCESS_MODES = new Map([
  ["ReadWriteOnce", "RWO"],
  ["ReadOnlyMany", "ROX"],
  ["ReadWriteMany", "RWX"],
  ["ReadWriteOncePod", "RWOP"],
]);
const accessModes = (modes: unknown): string => orNone(arr(modes).map((m) => ACCESS_MODES.get(str(m)) ?? str(m)).join(","));
const ago = (t: unknown, now: number): string => {
  const at = Date.parse(str(t));
  return Number.isNaN(at) ? "<unknown>" : formatAge(now - at);
};

/** kubectl's columns of built-in types, by "resource.group". */
const BUILTIN: Readonly<Record<string, readonly Column[]>> = {
  pods: [
    col("Ready", podReady, "ready containers / containers"),
    col("Status", podStatus, "as kubectl computes it from the pod's phase and containers' states"),
    timedCol("Restarts", podRestarts),
    col("Node", (o) => orNone(str(spec(o)["nodeName"]))),
    AGE,
  ],
  "deployments.apps": [
    col("Ready", (o) => `${num(status(o)["readyReplicas"])}/${num(spec(o)["replicas"] ?? 1)}`),
    col("Up-to-date", (o) => String(num(status(o)["updatedReplicas"]))),
    col("Available", (o) => String(num(status(o)["availableReplicas"]))),
    AGE,
  ],
  "replicasets.apps": [
    col("Desired", (o) => String(num(spec(o)["replicas"] ?? 1))),
    col("Current", (o) => String(num(status(o)["replicas"]))),
    col("Ready", (o) => String(num(status(o)["readyReplicas"]))),
    AGE,
  ],
  "statefulsets.apps": [col("Ready", (o) => `${num(status(o)["readyReplicas"])}/${num(spec(o)["replicas"] ?? 1)}`), AGE],
  "daemonsets.apps": [
    col("Desired", (o) => String(num(status(o)["desiredNumberScheduled"]))),
    col("Current", (o) => String(num(status(o)["currentNumberScheduled"]))),
    col("Ready", (o) => String(num(status(o)["numberReady"]))),
    col("Up-to-date", (o) => String(num(status(o)["updatedNumberScheduled"]))),
    col("Available", (o) => String(num(status(o)["numberAvailable"]))),
    col("Node selector", (o) => orNone(Object.entries(obj(obj(obj(spec(o)["template"])["spec"])["nodeSelector"])).map(([k, v]) => `${k}=${str(v)}`).join(","))),
    AGE,
  ],
  "jobs.batch": [
    col("Completions", (o) => `${num(status(o)["succeeded"])}/${num(spec(o)["completions"] ?? 1)}`),
    timedCol("Duration", (o, now) => {
      const start = Date.parse(str(status(o)["startTime"]));
      if (Number.isNaN(start)) return "";
      const end = Date.parse(str(status(o)["completionTime"]));
      return formatAge((Number.isNaN(end) ? now : end) - start);
    }),
    AGE,
  ],
  "cronjobs.batch": [
    col("Schedule", (o) => str(spec(o)["schedule"])),
    col("Suspend", (o) => String(spec(o)["suspend"] === true ? "True" : "False")),
    col("Active", (o) => String(arr(status(o)["active"]).length)),
    timedCol("Last schedule", (o, now) => (status(o)["lastScheduleTime"] === undefined ? "<none>" : ago(status(o)["lastScheduleTime"], now))),
    AGE,
  ],
  services: [
    col("Type", (o) => str(spec(o)["type"]) || "ClusterIP"),
    col("Cluster-IP", (o) => orNone(str(spec(o)["clusterIP"]))),
    col("External-IP", serviceExternalIP),
    col("Port(s)", servicePorts),
    AGE,
  ],
  "ingresses.networking.k8s.io": [
    col("Class", (o) => orNone(str(spec(o)["ingressClassName"]))),
    col("Hosts", (o) => arr(spec(o)["rules"]).map(obj).map((r) => str(r["host"])).filter((h) => h !== "").join(",") || "*"),
    col("Address", (o) => arr(obj(status(o)["loadBalancer"])["ingress"]).map(obj).map((i) => str(i["ip"]) || str(i["hostname"])).join(",")),
    col("Ports", (o) => (arr(spec(o)["tls"]).length > 0 ? "80, 443" : "80")),
    AGE,
  ],
  endpoints: [
    col("Endpoints", (o) => {
      const eps: string[] = [];
      for (const s of arr(o["subsets"]).map(obj)) {
        for (const a of arr(s["addresses"]).map(obj)) for (const p of arr(s["ports"]).map(obj)) eps.push(`${str(a["ip"])}:${num(p["port"])}`);
      }
      return orNone(eps.length > 3 ? `${eps.slice(0, 3).join(",")} + ${eps.length - 3} more...` : eps.join(","));
    }),
    AGE,
  ],
  nodes: [
    col("Status", nodeStatus),
    col("Roles", nodeRoles),
    AGE,
    col("Version", (o) => str(obj(status(o)["nodeInfo"])["kubeletVersion"])),
  ],
  namespaces: [col("Status", (o) => str(status(o)["phase"])), AGE],
  configmaps: [col("Data", dataCount, "keys in data and binaryData"), AGE],
  secrets: [col("Type", (o) => str(o["type"])), col("Data", dataCount, "keys in data"), AGE],
  serviceaccounts: [col("Secrets", (o) => String(arr(o["secrets"]).length)), AGE],
  persistentvolumeclaims: [
    col("Status", (o) => str(status(o)["phase"])),
    col("Volume", (o) => str(spec(o)["volumeName"])),
    col("Capacity", (o) => str(obj(status(o)["capacity"])["storage"])),
    col("Access modes", (o) => accessModes(status(o)["accessModes"])),
    col("StorageClass", (o) => orNone(str(spec(o)["storageClassName"]))),
    AGE,
  ],
  persistentvolumes: [
    col("Capacity", (o) => str(obj(spec(o)["capacity"])["storage"])),
    col("Access modes", (o) => accessModes(spec(o)["accessModes"])),
    col("Reclaim policy", (o) => str(spec(o)["persistentVolumeReclaimPolicy"])),
    col("Status", (o) => str(status(o)["phase"])),
    col("Claim", (o) => {
      const ref = obj(spec(o)["claimRef"]);
      return ref["name"] === undefined ? "" : `${str(ref["namespace"])}/${str(ref["name"])}`;
    }),
    col("StorageClass", (o) => orNone(str(spec(o)["storageClassName"]))),
    AGE,
  ],
  events: [
    timedCol("Last seen", (o, now) => ago(o["lastTimestamp"] ?? o["eventTime"] ?? o.metadata?.creationTimestamp, now)),
    col("Type", (o) => str(o["type"])),
    col("Reason", (o) => str(o["reason"])),
    col("Object", (o) => `${str(obj(o["involvedObject"])["kind"]).toLowerCase()}/${str(obj(o["involvedObject"])["name"])}`),
    col("Message", (o) => str(o["message"])),
  ],
  "storageclasses.storage.k8s.io": [
    col("Provisioner", (o) => str(o["provisioner"])),
    col("Reclaim policy", (o) => str(o["reclaimPolicy"]) || "Delete"),
    col("Volume binding mode", (o) => str(o["volumeBindingMode"]) || "Immediate"),
    AGE,
  ],
  "customresourcedefinitions.apiextensions.k8s.io": [col("Created at", (o) => str(o.metadata?.creationTimestamp))],
};

/**
 * A CRD's printer column as the API server's table converter makes it:
 * the first value at json_path, as the column's type (a date as an age; a
 * value of another type than the column's is <none>); "<invalid>" for a
 * path this console cannot read.
 */
function printerColumn(c: ResourceType["printerColumns"][number]): Column {
  const path = parsePath(c.jsonPath);
  const invalid = "error" in path;
  return {
    name: c.name,
    description: c.description,
    timed: c.type === "date",
    value: (o, now) => {
      if (invalid) return "<invalid>";
      const values = evaluate(path, o, 1);
      if (values.length === 0) return "<none>";
      return printerValue(c.type, values[0], now);
    },
  };
}

/** A value of a printer column of type, as kubectl prints the API server's cell. */
export function printerValue(type: string, v: unknown, now: number): string {
  if (v === null || v === undefined) return "<none>";
  switch (type) {
    case "integer":
      return typeof v === "number" && Number.isFinite(v) ? String(Math.trunc(v)) : "<none>";
    case "number":
      return typeof v === "number" ? String(v) : "<none>";
    case "boolean":
      return typeof v === "boolean" ? String(v) : "<none>";
    case "date":
      if (typeof v !== "string") return "<none>";
      return Number.isNaN(Date.parse(v)) ? "<invalid>" : ageOf(v, now);
    default:
      // string, and any type kubectl does not know: as kubectl's jsonpath prints it.
      return typeof v === "string" ? v : JSON.stringify(v);
  }
}

/** The columns of a resource type, after Namespace and Name. */
export function columnsOf(r: ResourceType): readonly Column[] {
  const shown = r.printerColumns.filter((c) => c.priority === 0);
  if (shown.length > 0) return shown.map(printerColumn);
  return BUILTIN[r.group === "" ? r.resource : `${r.resource}.${r.group}`] ?? [AGE];
}
