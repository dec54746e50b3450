// The table's columns as kubectl shows them, the JSONPath subset of CRDs'
// printer columns, and the sidebar's sections.

import assert from "node:assert/strict";
import { test } from "node:test";
import type { KubeObject } from "@informerhub/web";
import { columnsOf, podStatus } from "../src/columns.js";
import { sectionOf } from "../src/groups.js";
import { evaluate, parsePath } from "../src/jsonpath.js";

const now = Date.parse("2026-11-26T12:00:00Z");
const created = "2026-11-26T11:55:00Z"; // 5m before now

function row(resource: { group: string; resource: string; printerColumns?: never[] | Parameters<typeof columnsOf>[0]["printerColumns"] }, o: KubeObject) {
  const columns = columnsOf({ group: resource.group, resource: resource.resource, printerColumns: resource.printerColumns ?? [] });
  return Object.fromEntries(columns.map((c) => [c.name, c.value(o, now)]));
}

test("pods show Ready, Status, Restarts, Node and Age as kubectl does", () => {
  const pod: KubeObject = {
    metadata: { name: "web-0", creationTimestamp: created },
    spec: { nodeName: "node-1", containers: [{ name: "a" }, { name: "b" }] },
    status: {
      phase: "Running",
      containerStatuses: [
        { name: "a", ready: true, restartCount: 2, state: { running: {} }, lastState: { terminated: { finishedAt: "2026-11-26T11:58:00Z" } } },
        { name: "b", ready: false, restartCount: 1, state: { waiting: { reason: "CrashLoopBackOff" } } },
      ],
    },
  };
  assert.deepEqual(row({ group: "", resource: "pods" }, pod), {
    Ready: "1/2",
    Status: "CrashLoopBackOff",
    Restarts: "3 (2m ago)",
    Node: "node-1",
    Age: "5m",
  });
  // Pending, unscheduled: no node.
  assert.deepEqual(row({ group: "", resource: "pods" }, { metadata: { name: "p" }, spec: { containers: [{}] }, status: { phase: "Pending" } }), {
    Ready: "0/1",
    Status: "Pending",
    Restarts: "0",
    Node: "<none>",
    Age: "",
  });
});

test("a pod's Status: init containers, terminated reasons and signals, Terminating", () => {
  const init = (state: object): KubeObject => (<KubeObject><unknown>{
    spec: { initContainers: [{}, {}], containers: [{}] },
    status: { phase: "Pending", initContainerStatuses: [{ state: { terminated: { exitCode: 0 } } }, { state }] },
  });
  assert.equal(podStatus(init({ waiting: { reason: "PodInitializing" } })), "Init:1/2");
  assert.equal(podStatus(init({ waiting: { reason: "ImagePullBackOff" } })), "Init:ImagePullBackOff");
  assert.equal(podStatus(init({ terminated: { exitCode: 3 } })), "Init:ExitCode:3");
  const container = (state: object): KubeObject => (<KubeObject><unknown>{ spec: { containers: [{}] }, status: { phase: "Running", containerStatuses: [{ state }] } });
  assert.equal(podStatus(container({ terminated: { reason: "OOMKilled", exitCode: 137 } })), "OOMKilled");
  assert.equal(podStatus(container({ terminated: { signal: 9, exitCode: 137 } })), "Signal:9");
  assert.equal(podStatus(container({ terminated: { exitCode: 1 } })), "ExitCode:1");
  assert.equal(podStatus({ metadata: { deletionTimestamp: created }, status: { phase: "Running" } }), "Terminating");
  assert.equal(podStatus({ status: { phase: "Failed", reason: "Evicted" } }), "Evicted");
});

test("deployments, configmaps, services and nodes show kubectl's columns", () => {
  assert.deepEqual(
    row({ group: "apps", resource: "deployments" }, { spec: { replicas: 3 }, status: { readyReplicas: 2, updatedReplicas: 3, availableReplicas: 2 }, metadata: { creationTimestamp: created } }),
    { Ready: "2/3", "Up-to-date": "3", Available: "2", Age: "5m" },
  );
  assert.deepEqual(row({ group: "", resource: "configmaps" }, { data: { a: "1", b: "2" }, binaryData: { c: "" } }), { Data: "3", Age: "" });
  assert.deepEqual(
    row({ group: "", resource: "services" }, { spec: { type: "NodePort", clusterIP: "10.0.0.1", ports: [{ port: 80, nodePort: 30080, protocol: "TCP" }] } }),
    { Type: "NodePort", "Cluster-IP": "10.0.0.1", "External-IP": "<none>", "Port(s)": "80:30080/TCP", Age: "" },
  );
  assert.deepEqual(
    row({ group: "", resource: "nodes" }, {
      metadata: { labels: { "node-role.kubernetes.io/control-plane": "" } },
      spec: { unschedulable: true },
      status: { conditions: [{ type: "Ready", status: "True" }], nodeInfo: { kubeletVersion: "v1.37.1" } },
    }),
    { Status: "Ready,SchedulingDisabled", Roles: "control-plane", Age: "", Version: "v1.37.1" },
  );
  // A type the console does not know: Age alone.
  assert.deepEqual(row({ group: "example.org", resource: "things" }, { metadata: { creationTimestamp: created } }), { Age: "5m" });
});

test("a CRD's printer columns of priority 0, read by their JSONPath, the first value only; invalid paths show <invalid>, never throw", () => {
  const printerColumns = [
    { name: "Color", type: "string", description: "", priority: 0, jsonPath: ".spec.color" },
    { name: "Sizes", type: "integer", description: "", priority: 0, jsonPath: ".spec.parts[*].size" },
    { name: "Wide", type: "string", description: "", priority: 1, jsonPath: ".spec.wide" },
    { name: "Since", type: "date", description: "", priority: 0, jsonPath: ".metadata.creationTimestamp" },
    { name: "Ready", type: "string", description: "", priority: 0, jsonPath: `.status.conditions[?(@.type=="Ready")].status` },
    { name: "Missing", type: "string", description: "", priority: 0, jsonPath: ".spec.nothing" },
    { name: "Bad", type: "string", description: "", priority: 0, jsonPath: ".spec[?(@.x < 1)]" },
  ];
  const widget: KubeObject = { metadata: { creationTimestamp: created }, spec: { color: "<b>red</b>", parts: [{ size: 1 }, { size: 2 }], wide: "x" } };
  assert.deepEqual(row({ group: "example.com", resource: "widgets", printerColumns }, widget), {
    Color: "<b>red</b>", // as text: the view writes it with textContent
    // As the API server's table converter: the first match, not all joined.
    Sizes: "1",
    Since: "5m",
    Ready: "<none>", // no conditions
    Missing: "<none>",
    Bad: "<invalid>",
  });
});

// Columns as cert-manager's Certificate and Flux's Kustomization define them.
const certificateColumns = [
  { name: "Ready", type: "string", description: "", priority: 0, jsonPath: `.status.conditions[?(@.type=="Ready")].status` },
  { name: "Secret", type: "string", description: "", priority: 0, jsonPath: ".spec.secretName" },
  { name: "Issuer", type: "string", description: "", priority: 1, jsonPath: ".spec.issuerRef.name" },
  { name: "Status", type: "string", description: "", priority: 1, jsonPath: `.status.conditions[?(@.type=="Ready")].message` },
  { name: "Age", type: "date", description: "CreationTimestamp is a timestamp", priority: 0, jsonPath: ".metadata.creationTimestamp" },
];
const kustomizationColumns = [
  { name: "Age", type: "date", description: "", priority: 0, jsonPath: ".metadata.creationTimestamp" },
  { name: "Ready", type: "string", description: "", priority: 0, jsonPath: `.status.conditions[?(@.type=='Ready')].status` },
  { name: "Status", type: "string", description: "", priority: 0, jsonPath: `.status.conditions[?(@.type=='Ready')].message` },
];

test("filters of real CRDs' Ready columns: cert-manager's Certificate, Flux's Kustomization", () => {
  const conditions = [
    { type: "Issuing", status: "False", message: "issued" },
    { type: "Ready", status: "True", message: "Certificate is up to date and has not expired" },
  ];
  const cert: KubeObject = { metadata: { creationTimestamp: created }, spec: { secretName: "web-tls", issuerRef: { name: "le" } }, status: { conditions } };
  assert.deepEqual(row({ group: "cert-manager.io", resource: "certificates", printerColumns: certificateColumns }, cert), {
    Ready: "True",
    Secret: "web-tls",
    Age: "5m",
  });
  const ks: KubeObject = { metadata: { creationTimestamp: created }, status: { conditions: [{ type: "Ready", status: "False", message: "kustomize build failed" }] } };
  assert.deepEqual(row({ group: "kustomize.toolkit.fluxcd.io", resource: "kustomizations", printerColumns: kustomizationColumns }, ks), {
    Age: "5m",
    Ready: "False",
    Status: "kustomize build failed",
  });
  // Not yet reconciled: no Ready condition.
  assert.deepEqual(row({ group: "kustomize.toolkit.fluxcd.io", resource: "kustomizations", printerColumns: kustomizationColumns }, { metadata: { creationTimestamp: created } }), {
    Age: "5m",
    Ready: "<none>",
    Status: "<none>",
  });
});

test("printer columns' types as kubectl prints the API server's cells", () => {
  const col = (type: string, jsonPath: string) => ({ name: "C", type, description: "", priority: 0, jsonPath });
  const value = (type: string, v: unknown) => row({ group: "x.io", resource: "xs", printerColumns: [col(type, ".v")] }, { v } as KubeObject)["C"];
  assert.equal(value("integer", 3), "3");
  assert.equal(value("integer", 2.9), "2"); // int64(float64)
  assert.equal(value("integer", "3"), "<none>"); // a string is not an integer
  assert.equal(value("number", 0.5), "0.5");
  assert.equal(value("number", "x"), "<none>");
  assert.equal(value("boolean", true), "true");
  assert.equal(value("boolean", "true"), "<none>");
  assert.equal(value("date", created), "5m");
  assert.equal(value("date", "yesterday"), "<invalid>");
  assert.equal(value("date", 5), "<none>");
  assert.equal(value("string", "a"), "a");
  assert.equal(value("string", { a: 1 }), '{"a":1}');
  assert.equal(value("string", null), "<none>");
  // A column over a huge array reads its first value, without spreading it.
  const big = Array.from({ length: 300_000 }, (_, i) => ({ n: i }));
  assert.equal(row({ group: "x.io", resource: "xs", printerColumns: [col("integer", ".v[*].n")] }, { v: big } as KubeObject)["C"], "0");
  // Only Age-like columns move with time.
  const timed = columnsOf({ group: "cert-manager.io", resource: "certificates", printerColumns: certificateColumns }).map((c) => [c.name, c.timed]);
  assert.deepEqual(timed, [["Ready", false], ["Secret", false], ["Age", true]]);
  assert.deepEqual(columnsOf({ group: "", resource: "pods", printerColumns: [] }).map((c) => [c.name, c.timed]), [
    ["Ready", false],
    ["Status", false],
    ["Restarts", true],
    ["Node", false],
    ["Age", true],
  ]);
});

test("persistent volumes' access modes: known ones abbreviated, others as they are, none from the prototype", () => {
  const pv = (modes: string[]) => row({ group: "", resource: "persistentvolumes" }, { metadata: { creationTimestamp: created }, spec: { accessModes: modes } })["Access modes"];
  assert.equal(pv(["ReadWriteOnce", "ReadOnlyMany"]), "RWO,ROX");
  assert.equal(pv(["constructor", "toString", "__proto__"]), "constructor,toString,__proto__");
});

test("the JSONPath subset: names, quoted names, indexes, wildcards", () => {
  const o = { a: { "b.c": [{ d: 1 }, { d: 2 }], e: { f: "g" } } };
  const at = (p: string) => evaluate(parsePath(p), o);
  assert.deepEqual(at(".a['b.c'][0].d"), [1]);
  assert.deepEqual(at('.a["b.c"][-1].d'), [2]);
  assert.deepEqual(at(".a['b.c'][*].d"), [1, 2]);
  assert.deepEqual(at("{.a.e.f}"), ["g"]);
  assert.deepEqual(at(".a.*.f"), ["g"]);
  assert.deepEqual(at(".a.x.y"), []);
  assert.deepEqual(at(".a['b.c'][5]"), []);
  for (const bad of ["", "a.b", ".a[", ".a[?(@.x)]", ".a[?(@.x==1]", ".a[?(@.x=~/y/)]", ".a..b", ".a[1:2]", ".constructor", "'.a'"]) {
    const p = parsePath(bad);
    if (!("error" in p)) assert.deepEqual(evaluate(p, o), [], bad); // .constructor: an own property only
    else assert.deepEqual(evaluate(p, o), [], bad);
  }
  assert.ok("error" in parsePath(".a[?(@.x)]"));
  assert.ok("error" in parsePath(".a[?(@.x==1]"));
  assert.deepEqual(evaluate(parsePath(".constructor"), {}), []);
  assert.deepEqual(evaluate(parsePath(".__proto__"), {}), []);
});

test("JSONPath filters: == and != on strings, numbers and booleans, @ paths, either quotes", () => {
  const o = {
    items: [
      { type: "Ready", status: "True", n: 1, ok: true, meta: { "a.b": "x" } },
      { type: "Synced", status: "False", n: 2, ok: false, meta: { "a.b": "y" } },
      { status: "Unknown", n: 3 },
    ],
  };
  const at = (p: string) => evaluate(parsePath(p), o);
  assert.deepEqual(at(`.items[?(@.type=="Ready")].status`), ["True"]);
  assert.deepEqual(at(`.items[?(@.type == 'Synced')].status`), ["False"]);
  // != leaves out items without the path, as kubectl does.
  assert.deepEqual(at(`.items[?(@.type!="Ready")].status`), ["False"]);
  assert.deepEqual(at(`.items[?(@.n==2)].type`), ["Synced"]);
  assert.deepEqual(at(`.items[?(@.n!=2)].n`), [1, 3]);
  assert.deepEqual(at(`.items[?(@.ok==true)].type`), ["Ready"]);
  assert.deepEqual(at(`.items[?(@.ok==false)].type`), ["Synced"]);
  assert.deepEqual(at(`.items[?(@.meta['a.b']=="y")].n`), [2]);
  // A string is not a number, nor "true" a boolean.
  assert.deepEqual(at(`.items[?(@.n=="1")].n`), []);
  assert.deepEqual(at(`.items[?(@.status=="True")].ok`), [true]);
  // Quotes inside the literal, and a ")]" inside quotes.
  assert.deepEqual(evaluate(parsePath(`.c[?(@.m=="a)]b")].v`), { c: [{ m: "a)]b", v: 1 }] }), [1]);
  // The first only, when asked.
  assert.deepEqual(evaluate(parsePath(".items[*].n"), o, 1), [1]);
});

test("the sidebar's sections", () => {
  const s = (group: string, resource: string, printerColumns: unknown[] = []) => sectionOf({ group, resource, printerColumns });
  assert.equal(s("", "pods"), "Workloads");
  assert.equal(s("apps", "deployments"), "Workloads");
  assert.equal(s("networking.k8s.io", "ingresses"), "Network");
  assert.equal(s("", "configmaps"), "Config");
  assert.equal(s("rbac.authorization.k8s.io", "roles"), "Access control");
  assert.equal(s("", "nodes"), "Cluster");
  assert.equal(s("example.com", "widgets"), "Custom resources");
  assert.equal(s("example.com", "gadgets", [{}]), "Custom resources");
  assert.equal(s("flowcontrol.apiserver.k8s.io", "flowschemas"), "Other");
});
