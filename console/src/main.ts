// The console: sign in, pick what to watch, and see the objects live. It
// talks to the hub that serves it (location.origin) with the Connect
// protocol, through the web client, whose watch resumes exactly by itself.
// Everything that comes from the hub or the cluster is written with
// textContent, never as HTML.

import {
  Code,
  ConnectError,
  DEFAULT_BACKOFF,
  createTransport,
  hubClient,
  hubError,
  snapshot,
  watch,
  type Backoff,
  type Resource,
  type Selector,
  type WatchEvent,
  type WatchOptions,
} from "@informerhub/web";
import { AGE, columnsOf, type Column } from "./columns.js";
import { changeOf, pretty, withoutManagedFields } from "./diff.js";
import { errorSummary, errorView } from "./errors.js";
import { parseFields, resourceLabel } from "./format.js";
import { SECTIONS, sectionOf, type Section } from "./groups.js";
import { clearToken, getToken, setToken } from "./session.js";
import { ObjectTable, type Row } from "./table.js";
import { ResumingWatchMany } from "./watchmany.js";
import { toYAML } from "./yaml.js";

/** The element with id, of the type expected; the page is ours, so a missing one is a bug. */
function $<T extends HTMLElement>(id: string, type: new () => T): T {
  const el = document.getElementById(id);
  if (!(el instanceof type)) throw new Error(`console: no ${type.name} #${id}`);
  return el;
}

const ui = {
  status: $("status", HTMLElement),
  objectCount: $("object-count", HTMLElement),
  eventCount: $("event-count", HTMLElement),
  signinForm: $("signin-form", HTMLFormElement),
  tokenInput: $("token-input", HTMLInputElement),
  signoutButton: $("signout-button", HTMLButtonElement),
  signinState: $("signin-state", HTMLElement),
  queryForm: $("query-form", HTMLFormElement),
  namespaceInput: $("namespace-input", HTMLInputElement),
  namespaceList: $("namespace-list", HTMLElement),
  resourceSelect: $("resource-select", HTMLSelectElement),
  refreshResources: $("refresh-resources-button", HTMLButtonElement),
  labelSelector: $("label-selector-input", HTMLInputElement),
  fieldSelector: $("field-selector-input", HTMLInputElement),
  selectableFields: $("selectable-fields", HTMLElement),
  resourcesNote: $("resources-note", HTMLElement),
  filter: $("filter-input", HTMLTextAreaElement),
  fields: $("fields-input", HTMLInputElement),
  columnsNote: $("columns-note", HTMLElement),
  includePrevious: $("include-previous", HTMLInputElement),
  startButton: $("start-button", HTMLButtonElement),
  stopButton: $("stop-button", HTMLButtonElement),
  resumeButton: $("resume-button", HTMLButtonElement),
  error: $("error", HTMLElement),
  errorCode: $("error-code", HTMLElement),
  errorReason: $("error-reason", HTMLElement),
  errorMessage: $("error-message", HTMLElement),
  errorViolations: $("error-violations", HTMLUListElement),
  errorMetadata: $("error-metadata", HTMLElement),
  errorHint: $("error-hint", HTMLElement),
  notice: $("notice", HTMLElement),
  resumeToken: $("resume-token", HTMLElement),
  copyToken: $("copy-token-button", HTMLButtonElement),
  sidebar: $("sidebar", HTMLElement),
  head: $("objects-head", HTMLTableRowElement),
  body: $("objects-body", HTMLTableSectionElement),
  detail: $("detail", HTMLElement),
  detailTitle: $("detail-title", HTMLElement),
  detailFilterError: $("detail-filter-error", HTMLElement),
  detailFolded: $("detail-folded", HTMLElement),
  detailDiff: $("detail-diff", HTMLElement),
  detailYAML: $("detail-yaml", HTMLElement),
  detailJSON: $("detail-json", HTMLElement),
  viewYAML: $("view-yaml-button", HTMLButtonElement),
  viewJSON: $("view-json-button", HTMLButtonElement),
  showManagedFields: $("show-managed-fields", HTMLInputElement),
};

// The token is read from the session for every call, so signing in again
// takes effect at the next call or reconnection.
const transport = createTransport({ baseUrl: location.origin, getToken, protocol: "connect", binary: true });

type State = "signed-out" | "idle" | "connecting" | "initial" | "live" | "reconnecting" | "resyncing" | "stopped" | "error";

function setStatus(state: State, text: string = state): void {
  ui.status.dataset["state"] = state;
  ui.status.textContent = text;
}

// ---- Errors ----

function showError(err: unknown): void {
  const v = errorView(err);
  ui.errorCode.textContent = v.code;
  ui.errorReason.textContent = v.reason || "(no reason)";
  ui.errorMessage.textContent = v.message;
  ui.errorViolations.replaceChildren(...v.violations.map((text) => Object.assign(document.createElement("li"), { textContent: text })));
  ui.errorMetadata.textContent = v.metadata.join("  ");
  ui.errorHint.textContent = v.hint;
  ui.error.dataset["code"] = v.code;
  ui.error.dataset["reason"] = v.reason;
  ui.error.hidden = false;
}

function clearError(): void {
  ui.error.hidden = true;
  delete ui.error.dataset["code"];
  delete ui.error.dataset["reason"];
}

function showNotice(text: string): void {
  ui.notice.textContent = text;
  ui.notice.hidden = text === "";
}

// ---- Sign in ----

// Signed out: the form. Signed in: Sign out. Never both.
function refreshSignedIn(): void {
  const signedIn = getToken() !== "";
  ui.signinForm.hidden = signedIn;
  ui.signoutButton.hidden = !signedIn;
  ui.signinState.textContent = signedIn ? "signed in" : "signed out";
  ui.signinState.dataset["signedIn"] = String(signedIn);
}

ui.signinForm.addEventListener("submit", (e) => {
  e.preventDefault();
  const token = ui.tokenInput.value.trim();
  ui.tokenInput.value = "";
  if (token === "") return;
  setToken(token);
  refreshSignedIn();
  clearError();
  if (current === null) setStatus("idle");
  void loadResources();
  void loadNamespaces();
});

ui.signoutButton.addEventListener("click", () => {
  stop();
  clearToken();
  // What was asked with the token signed out must not come back.
  resourcesCall?.abort();
  resourcesCall = null;
  namespacesCall?.abort();
  namespacesCall = null;
  resources = [];
  ui.resourcesNote.textContent = "";
  fillResources();
  ui.namespaceList.replaceChildren();
  table.clear();
  rowElements.clear();
  ui.body.replaceChildren();
  eventCount = 0;
  lastToken = "";
  selectedKey = null;
  ui.detail.hidden = true;
  clearError();
  showNotice("");
  refreshSignedIn();
  render();
  setStatus("signed-out", "signed out");
});

// ---- Resources and the sidebar ----

let resources: Resource[] = [];
let resourcesCall: AbortController | null = null;
let namespacesCall: AbortController | null = null;
/** The most types one WatchMany may hold (ListResourcesResponse.max_watches_per_stream; 0: not said). */
let maxWatches = 0;
/** The types ticked in the sidebar, by label; one or none: the picker's. */
const checked = new Set<string>();

async function loadResources(): Promise<void> {
  if (getToken() === "") return;
  resourcesCall?.abort();
  const call = new AbortController();
  resourcesCall = call;
  const namespace = ui.namespaceInput.value.trim();
  try {
    const response = await hubClient(transport).listResources({ namespace }, { signal: call.signal });
    if (call.signal.aborted) return;
    const listed = response.resources;
    maxWatches = response.maxWatchesPerStream;
    if (listed.length === 0 && resources.length > 0) {
      // Keep the types listed before: a watch here is then refused with
      // PERMISSION_DENIED, which says what access is missing.
      ui.resourcesNote.textContent = `You may list and watch no resource type ${namespace === "" ? "cluster-wide" : `in namespace ${namespace}`}; the list is the one before.`;
      return;
    }
    ui.resourcesNote.textContent = "";
    resources = listed;
    fillResources();
  } catch (err) {
    if (call.signal.aborted) return;
    showError(err);
  }
}

// The namespaces the caller may list, as suggestions: free text stays
// possible, and a caller who may not list them types the name.
async function loadNamespaces(): Promise<void> {
  if (getToken() === "") return;
  namespacesCall?.abort();
  const call = new AbortController();
  namespacesCall = call;
  try {
    const s = await snapshot(transport, { version: "v1", resource: "namespaces" }, { fields: ["metadata.name"], signal: call.signal });
    if (call.signal.aborted) return;
    ui.namespaceList.replaceChildren(
      ...s.objects.map((o) => {
        const option = document.createElement("option");
        option.value = o.metadata?.name ?? "";
        return option;
      }),
    );
  } catch {
    if (!call.signal.aborted) ui.namespaceList.replaceChildren();
  }
}

function fillResources(): void {
  const previous = ui.resourceSelect.selectedOptions[0]?.textContent ?? "";
  const options = resources.map((r, i) => {
    const o = document.createElement("option");
    o.value = String(i);
    o.textContent = resourceLabel(r);
    o.dataset["group"] = r.group;
    o.dataset["version"] = r.version;
    o.dataset["resource"] = r.resource;
    return o;
  });
  if (options.length === 0) {
    const none = document.createElement("option");
    none.value = "";
    none.textContent = getToken() === "" ? "sign in to list resources" : "no resource you may watch here";
    options.push(none);
  }
  ui.resourceSelect.replaceChildren(...options);
  // Keep the choice across refreshes; else the first core resource, ConfigMaps if there are.
  const keep = resources.findIndex((r) => resourceLabel(r) === previous);
  const configmaps = resources.findIndex((r) => r.group === "" && r.resource === "configmaps");
  const pick = keep >= 0 ? keep : Math.max(configmaps, 0);
  if (resources.length > 0) ui.resourceSelect.value = String(pick);
  ui.resourceSelect.disabled = resources.length === 0;
  ui.startButton.disabled = resources.length === 0;
  const labels = new Set(resources.map(resourceLabel));
  for (const l of [...checked]) if (!labels.has(l)) checked.delete(l);
  showSelectableFields();
  fillSidebar();
}

function selectedResource(): Resource | undefined {
  return resources[Number(ui.resourceSelect.value)];
}

/** What the next Start watches: the ticked types, or else the picker's. */
function selectedResources(): Resource[] {
  const ticked = resources.filter((r) => checked.has(resourceLabel(r)));
  if (ticked.length > 0) return ticked;
  const r = selectedResource();
  return r === undefined ? [] : [r];
}

function showSelectableFields(): void {
  const r = selectedResource();
  ui.selectableFields.textContent = r && r.selectableFields.length > 0 ? `fields: ${r.selectableFields.join(", ")}` : "";
}

/** The sections open by default; the others count their types when opened. */
const openSections = new Set<Section>(["Workloads", "Config", "Custom resources"]);
/** The sidebar's entry of each type, by label: its element, checkbox and count. */
const sidebarEntries = new Map<string, HTMLElement>();
const sidebarChecks = new Map<string, HTMLInputElement>();
const sidebarCounts = new Map<string, HTMLElement>();

function fillSidebar(): void {
  sidebarEntries.clear();
  sidebarChecks.clear();
  sidebarCounts.clear();
  const sections: HTMLElement[] = [];
  for (const section of SECTIONS) {
    const members = resources.filter((r) => sectionOf(r) === section);
    if (members.length === 0) continue;
    const details = document.createElement("details");
    details.dataset["testid"] = "sidebar-section";
    details.dataset["section"] = section;
    details.open = openSections.has(section);
    const summary = document.createElement("summary");
    summary.textContent = section;
    details.appendChild(summary);
    const list = document.createElement("ul");
    for (const r of members) list.appendChild(sidebarEntry(r));
    details.appendChild(list);
    details.addEventListener("toggle", () => {
      if (details.open) openSections.add(section);
      else openSections.delete(section);
      refreshCounts();
    });
    sections.push(details);
  }
  ui.sidebar.replaceChildren(...sections);
  restartCounts();
}

function sidebarEntry(r: Resource): HTMLElement {
  const label = resourceLabel(r);
  const li = document.createElement("li");
  li.dataset["testid"] = "sidebar-type";
  li.dataset["group"] = r.group;
  li.dataset["version"] = r.version;
  li.dataset["resource"] = r.resource;
  li.title = label;
  const box = document.createElement("input");
  box.type = "checkbox";
  box.title = `watch ${r.kind} with the other ticked types, over one stream`;
  box.dataset["testid"] = "sidebar-check";
  box.checked = checked.has(label);
  box.addEventListener("change", () => {
    if (box.checked && maxWatches > 0 && checked.size >= maxWatches) {
      // The hub refuses a WatchMany of more.
      box.checked = false;
      ui.resourcesNote.textContent = `One stream watches at most ${maxWatches} types (the hub's --max-watches-per-stream): untick one first.`;
      return;
    }
    if (box.checked) checked.add(label);
    else checked.delete(label);
    ui.resourcesNote.textContent = "";
  });
  const name = document.createElement("button");
  name.type = "button";
  name.className = "type-name";
  name.dataset["testid"] = "sidebar-select";
  name.textContent = r.kind;
  // One click: watch this type alone.
  name.addEventListener("click", () => {
    checked.clear();
    ui.resourceSelect.value = String(resources.indexOf(r));
    showSelectableFields();
    for (const b of sidebarChecks.values()) b.checked = false;
    startWatch();
  });
  const count = document.createElement("span");
  count.className = "count";
  count.dataset["testid"] = "sidebar-count";
  // Counting starts the hub's informer for the type, cluster-wide: on request.
  const ask = document.createElement("button");
  ask.type = "button";
  ask.className = "count-button";
  ask.dataset["testid"] = "sidebar-count-button";
  ask.textContent = "#";
  ask.title = `count the ${r.kind} objects (starts the hub's informer for the type, as a watch would)`;
  ask.addEventListener("click", () => countOnce(r));
  li.appendChild(box);
  li.appendChild(name);
  li.appendChild(count);
  li.appendChild(ask);
  sidebarEntries.set(label, li);
  sidebarChecks.set(label, box);
  sidebarCounts.set(label, count);
  return li;
}

// ---- Counts ----

// A browser opens at most 6 HTTP/1.1 connections to an origin, shared by
// all its tabs, and each server stream holds one. So a tab holds the watch
// and at most ONE live Count, of the first type watched, opened once the
// watch is connected (the watch comes first), closed on Stop and while the
// tab is hidden. Every other count is a one-shot Count, closed after its
// first response, a few at a time, each within a deadline: of the other
// types watched, and of the types whose informer the hub runs already
// (ListResources' informer_active). Counting any other type would start the
// hub's informer for it, cluster-wide: only when asked (the type's # button).
const ONE_SHOT_AT_ONCE = 2;
const ONE_SHOT_DEADLINE_MS = 10_000;
let liveCount: { readonly label: string; readonly call: AbortController } | null = null;
const oneShotQueue: Resource[] = [];
/** The one-shot Counts in flight, aborted when the counts restart. */
const oneShotCalls = new Set<AbortController>();
/** The types counted once (or queued), by label, since the sidebar was filled. */
const countedOnce = new Set<string>();
/** Bumped when the counts restart (a namespace changed, sign-out): older counts are dropped. */
let countEpoch = 0;
/** Whether the current watch is connected: live counts wait for it. */
let watchConnected = false;

function countSelector(r: Resource): { group: string; version: string; resource: string; namespace: string } {
  return { group: r.group, version: r.version, resource: r.resource, namespace: r.namespaced ? ui.namespaceInput.value.trim() : "" };
}

function showCount(r: Resource, total: bigint | null, error = ""): void {
  const li = sidebarEntries.get(resourceLabel(r));
  const el = sidebarCounts.get(resourceLabel(r));
  if (li === undefined || el === undefined) return;
  el.textContent = total === null ? (error === "" ? "" : "?") : String(total);
  el.title = error;
  if (total === null) delete li.dataset["count"];
  else li.dataset["count"] = String(total);
}

/** The types the current watch watches, once it is connected; none otherwise. */
function watchedTypes(): Resource[] {
  return current !== null && watchConnected && lastQuery !== null ? lastQuery.resources : [];
}

/** Counts the first watched type live, the other watched types and open sections' active types once. */
function refreshCounts(): void {
  const watched = watchedTypes();
  const visible = document.visibilityState !== "hidden";
  const liveType = visible ? watched[0] : undefined;
  const liveLabel = liveType === undefined ? null : resourceLabel(liveType);
  if (liveCount !== null && liveCount.label !== liveLabel) {
    liveCount.call.abort();
    liveCount = null;
  }
  if (liveType !== undefined && liveCount === null) countLive(liveType);
  const watchedLabels = new Set(watched.map(resourceLabel));
  for (const r of resources) {
    const label = resourceLabel(r);
    if (label === liveLabel || countedOnce.has(label)) continue;
    if (watchedLabels.has(label) || (r.informerActive && openSections.has(sectionOf(r)))) countOnce(r);
  }
}

/** Counts afresh: for a new sidebar, whose namespace may have changed, or none (signed out). */
function restartCounts(): void {
  countEpoch++;
  liveCount?.call.abort();
  liveCount = null;
  oneShotQueue.length = 0;
  for (const call of oneShotCalls) call.abort();
  oneShotCalls.clear();
  countedOnce.clear();
  refreshCounts();
}

// A hidden tab gives its live count's connection back; shown, it counts again.
document.addEventListener("visibilitychange", () => refreshCounts());

// Counts carry no token: a Count that ends is called again after the
// watch's backoff (with jitter), unless retrying cannot help.
const COUNT_FATAL = new Set<Code>([Code.InvalidArgument, Code.NotFound, Code.PermissionDenied, Code.Unauthenticated, Code.Unimplemented]);

/** The pause before the failures-th retry, as the web client's watch waits. */
export function backoffDelay(failures: number, b: Backoff = DEFAULT_BACKOFF, random = Math.random()): number {
  const delay = Math.min(b.initialMs * b.multiplier ** (failures - 1), b.maxMs);
  return delay * (1 + b.jitter * (2 * random - 1));
}

function countLive(r: Resource): void {
  const label = resourceLabel(r);
  const call = new AbortController();
  liveCount = { label, call };
  countedOnce.add(label); // its last live count stands when it stops
  void (async () => {
    let failures = 0;
    while (!call.signal.aborted) {
      if (failures > 0) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, backoffDelay(failures));
          call.signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
        });
        if (call.signal.aborted) return;
      }
      try {
        for await (const c of hubClient(transport).count({ selector: countSelector(r), groupBy: "" }, { signal: call.signal })) {
          failures = 0;
          showCount(r, c.total);
        }
        failures++; // the hub ended it: count again, after a pause
      } catch (err) {
        if (call.signal.aborted) return;
        showCount(r, null, errorSummary(err));
        if (COUNT_FATAL.has(hubError(err).code)) {
          if (liveCount?.call === call) liveCount = null;
          return;
        }
        failures++; // RESOURCE_EXHAUSTED and the like: back off too
      }
    }
  })();
}

/** Counts r once (again, if asked): the only way a type whose informer is not running is counted. */
function countOnce(r: Resource): void {
  countedOnce.add(resourceLabel(r));
  oneShotQueue.push(r);
  pumpCounts();
}

function pumpCounts(): void {
  while (oneShotCalls.size < ONE_SHOT_AT_ONCE && oneShotQueue.length > 0) {
    const r = oneShotQueue.shift()!;
    const epoch = countEpoch;
    const call = new AbortController();
    oneShotCalls.add(call);
    const deadline = setTimeout(() => call.abort(new ConnectError("no count within 10 s", Code.DeadlineExceeded)), ONE_SHOT_DEADLINE_MS);
    void (async () => {
      try {
        for await (const c of hubClient(transport).count({ selector: countSelector(r), groupBy: "" }, { signal: call.signal })) {
          // A live count of it, started meanwhile, is newer.
          if (epoch === countEpoch && liveCount?.label !== resourceLabel(r)) showCount(r, c.total);
          break;
        }
      } catch (err) {
        if (epoch === countEpoch) showCount(r, null, call.signal.aborted ? "no count within 10 s" : errorSummary(err));
      } finally {
        clearTimeout(deadline);
        call.abort();
        if (oneShotCalls.delete(call)) pumpCounts();
      }
    })();
  }
}

ui.resourceSelect.addEventListener("change", () => {
  checked.clear();
  for (const b of sidebarChecks.values()) b.checked = false;
  showSelectableFields();
});
ui.namespaceInput.addEventListener("change", () => void loadResources());
ui.refreshResources.addEventListener("click", () => void loadResources());

// ---- The watch ----

/** A watch of one type, or of several over one WatchMany. */
interface Running {
  readonly resumeToken: string;
  cancel(): void;
}

const table = new ObjectTable();
const rowElements = new Map<string, HTMLTableRowElement>();
const dirty = new Set<string>();
let current: Running | null = null;
let eventCount = 0;
let lastToken = "";
let selectedKey: string | null = null;

interface Query {
  readonly resources: Resource[];
  readonly selectors: Selector[];
  readonly options: WatchOptions;
}
/** What the last watch asked for: Resume asks for the same. */
let lastQuery: Query | null = null;

/** How the table shows the watched types. */
interface View {
  readonly multi: boolean;
  readonly namespaceColumn: boolean;
  /** Per scope ("" for one type; the watch's index otherwise). */
  readonly columns: readonly Column[];
}
let view: View = { multi: false, namespaceColumn: true, columns: [] };

function query(): Query | null {
  const picked = selectedResources();
  if (picked.length === 0) return null;
  const namespace = ui.namespaceInput.value.trim();
  return {
    resources: picked,
    selectors: picked.map((r) => ({
      group: r.group,
      version: r.version,
      resource: r.resource,
      // A cluster-scoped resource has no namespace (the hub refuses one).
      namespace: r.namespaced ? namespace : "",
      labelSelector: ui.labelSelector.value.trim(),
      fieldSelector: ui.fieldSelector.value.trim(),
      filter: ui.filter.value.trim(),
    })),
    options: { fields: parseFields(ui.fields.value), includePrevious: ui.includePrevious.checked },
  };
}

function startWatch(): void {
  const q = query();
  if (q === null) return;
  stop();
  table.clear();
  rowElements.clear();
  ui.body.replaceChildren();
  selectedKey = null;
  ui.detail.hidden = true;
  eventCount = 0;
  lastToken = "";
  lastQuery = q;
  setView(q);
  scheduleRender();
  void run(q, { sendInitialEvents: true });
}

ui.queryForm.addEventListener("submit", (e) => {
  e.preventDefault();
  startWatch();
});

function setView(q: Query): void {
  const multi = q.resources.length > 1;
  const namespaced = q.resources.some((r) => r.namespaced);
  view = {
    multi,
    namespaceColumn: namespaced && (multi || ui.namespaceInput.value.trim() === ""),
    // Several types share only kubectl's common columns.
    columns: multi ? [AGE] : columnsOf(q.resources[0]!),
  };
  const th = (text: string, title = "") => {
    const el = document.createElement("th");
    el.textContent = text;
    if (title !== "") el.title = title;
    return el;
  };
  const heads = [];
  if (view.multi) heads.push(th("Kind"));
  if (view.namespaceColumn) heads.push(th("Namespace"));
  heads.push(th("Name"));
  for (const c of view.columns) heads.push(th(c.name, c.description));
  ui.head.replaceChildren(...heads);
  // A projection leaves out what columns read elsewhere: they then show <none>.
  const fields = q.options.fields ?? [];
  const read = view.columns.filter((c) => c !== AGE).map((c) => c.name);
  ui.columnsNote.hidden = fields.length === 0 || read.length === 0;
  ui.columnsNote.textContent = ui.columnsNote.hidden
    ? ""
    : `With fields set, the hub sends only those (and the metadata): the columns ${read.join(", ")} show <none> unless the fields they read are among them.`;
  for (const [label, li] of sidebarEntries) li.classList.toggle("watched", q.resources.some((r) => resourceLabel(r) === label));
}

ui.stopButton.addEventListener("click", () => {
  stop();
  setStatus("stopped");
  ui.resumeButton.disabled = lastToken === "";
});

// After Stop, or an error that retrying cannot fix (access revoked,
// credentials expired) once fixed: watch again from the last token; the
// table is kept, and the watch brings it up to date exactly.
ui.resumeButton.addEventListener("click", () => {
  if (lastQuery === null || lastToken === "") return;
  stop();
  void run(lastQuery, { resumeToken: lastToken });
});

function stop(): void {
  current?.cancel();
  current = null;
  ui.stopButton.disabled = true;
  // The live count goes with the watch.
  watchConnected = false;
  refreshCounts();
}

async function run(q: Query, start: { sendInitialEvents?: boolean; resumeToken?: string }): Promise<void> {
  clearError();
  showNotice("");
  setStatus("connecting", "connecting…");
  ui.stopButton.disabled = false;
  ui.resumeButton.disabled = true;
  // Between an OUT_OF_RANGE and the end of the re-sync it causes.
  let resyncing = false;
  const resyncStatus = () => setStatus("resyncing", "re-syncing: the hub could no longer resume from the last token…");
  const callbacks = {
    onConnected: () => {
      if (current !== w) return;
      // The watch holds its connection: now the counts may take theirs.
      if (!watchConnected) {
        watchConnected = true;
        refreshCounts();
      }
      if (resyncing) resyncStatus();
      else if (table.isLive) setStatus("live");
      else setStatus("initial", "loading initial objects…");
    },
    onRetry: (err: unknown, failures: number) => {
      if (current !== w) return;
      if (hubError(err).code === Code.OutOfRange) {
        resyncing = true;
        resyncStatus();
      } else {
        setStatus("reconnecting", `reconnecting… (${errorSummary(err)}${failures > 1 ? `, attempt ${failures}` : ""})`);
      }
    },
  };
  // One type: the web client's Watch; several: one WatchMany, each type's
  // rows scoped by its index.
  const many = q.selectors.length > 1;
  const w: Running & AsyncIterable<{ index: number; event: WatchEvent; resyncStart?: boolean }> = many
    ? new ResumingWatchMany(transport, q.selectors, { ...q.options, ...start, ...callbacks })
    : single(q.selectors[0]!, { ...q.options, ...start, ...callbacks });
  current = w;
  // A re-sync a stopped watch left halfway is done again, from its start.
  table.cancelResync();
  try {
    for await (const { index, event, resyncStart } of w) {
      if (current !== w) break;
      const now = Date.now();
      if (event.type !== "BOOKMARK") eventCount++;
      lastToken = w.resumeToken;
      if (resyncStart === true) table.beginResync();
      for (const key of table.apply(event, now, many ? `${index}\u0001` : "")) dirty.add(key);
      if (event.initialEventsEnd) setStatus("live");
      if (event.type === "BOOKMARK" && event.resync) {
        resyncing = false;
        setStatus("live");
        showNotice("The hub could no longer resume from the last token: the console listed the objects again and applied the differences.");
      }
      scheduleRender();
    }
  } catch (err) {
    if (current !== w) return;
    lastToken = w.resumeToken;
    showError(err);
    setStatus("error", `stopped: ${errorSummary(err)}`);
    ui.resumeButton.disabled = lastToken === "";
  } finally {
    if (current === w) {
      current = null;
      ui.stopButton.disabled = true;
      watchConnected = false;
      refreshCounts();
    }
    scheduleRender();
  }
}

/** The web client's watch, its events as WatchMany's of index 0. */
function single(selector: Selector, options: WatchOptions): Running & AsyncIterable<{ index: number; event: WatchEvent; resyncStart?: boolean }> {
  const w = watch(transport, selector, options);
  return {
    get resumeToken() {
      return w.resumeToken;
    },
    cancel: () => w.cancel(),
    async *[Symbol.asyncIterator]() {
      for await (const event of w) yield { index: 0, event };
    },
  };
}

// ---- Rendering ----

let renderPending = false;
let lastRender = 0;
const RENDER_INTERVAL_MS = 50;

/**
 * Renders at most about 20 times a second, however fast events come: the
 * first change after a quiet moment at once (in the next task, after the
 * events that came with it), the next ones together.
 */
function scheduleRender(): void {
  if (renderPending) return;
  renderPending = true;
  const wait = Math.max(0, lastRender + RENDER_INTERVAL_MS - Date.now());
  setTimeout(() => {
    renderPending = false;
    lastRender = Date.now();
    render();
  }, wait);
}

function render(): void {
  const now = Date.now();
  const ordered = table.ordered();
  const keys = [...dirty].sort().reverse();
  const selectedChanged = selectedKey !== null && dirty.has(selectedKey);
  // Cleared first: a row that cannot be shown is not tried again and again.
  dirty.clear();
  // Last row first: the row after a new one is then on the page already
  // (the table is sorted by key), so each insertion is one step.
  for (const key of keys) {
    try {
      const row = table.get(key);
      let tr = rowElements.get(key);
      if (row === undefined) {
        tr?.remove();
        rowElements.delete(key);
        continue;
      }
      if (tr === undefined) {
        tr = newRow(row);
        rowElements.set(key, tr);
        const after = ordered[table.indexOf(key) + 1];
        ui.body.insertBefore(tr, after === undefined ? null : (rowElements.get(after.key) ?? null));
      }
      updateRow(tr, row, now, false);
    } catch (err) {
      // One row's failure must not keep the others off the page.
      console.error(`console: row ${key}:`, err);
    }
  }
  if (selectedChanged) scheduleDetail();
  ui.objectCount.textContent = String(table.count);
  ui.eventCount.textContent = String(eventCount);
  ui.resumeToken.textContent = lastToken;
  ui.copyToken.disabled = lastToken === "";
}

function newRow(row: Row): HTMLTableRowElement {
  const tr = document.createElement("tr");
  tr.dataset["testid"] = "row";
  tr.dataset["key"] = `${row.namespace}/${row.name}`;
  tr.dataset["namespace"] = row.namespace;
  tr.dataset["name"] = row.name;
  tr.tabIndex = 0;
  const cells = (view.multi ? 1 : 0) + (view.namespaceColumn ? 1 : 0) + 1 + view.columns.length;
  for (let i = 0; i < cells; i++) tr.appendChild(document.createElement("td"));
  const select = () => {
    selectedKey = row.key;
    for (const el of ui.body.querySelectorAll("tr.selected")) el.classList.remove("selected");
    tr.classList.add("selected");
    showDetail(row.key);
  };
  tr.addEventListener("click", select);
  tr.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      select();
    }
  });
  return tr;
}

/**
 * Writes row into tr: every cell, or (timedOnly, for the 1-second tick)
 * only the cells that move with time, such as ages. Only what changed is
 * written: the page then does no layout for the rest.
 */
function updateRow(tr: HTMLTableRowElement, row: Row, now: number, timedOnly: boolean): void {
  const cells = tr.cells;
  let i = 0;
  if (view.multi) {
    const kind = typeof row.object.kind === "string" ? row.object.kind : "";
    if (!timedOnly) setText(cells[i]!, kind);
    i++;
    if (!timedOnly && tr.dataset["kind"] !== kind) tr.dataset["kind"] = kind;
  }
  if (view.namespaceColumn) {
    if (!timedOnly) setText(cells[i]!, row.namespace);
    i++;
  }
  if (!timedOnly) setText(cells[i]!, row.name);
  i++;
  for (const c of view.columns) {
    const cell = cells[i++]!;
    if (timedOnly && !c.timed) continue;
    setText(cell, cellValue(c, row, now));
  }
  if (timedOnly) return;
  if (tr.dataset["resourceVersion"] !== row.resourceVersion) tr.dataset["resourceVersion"] = row.resourceVersion;
  for (const h of ["added", "modified", "deleted"] as const) {
    const on = row.highlight === h;
    if (tr.classList.contains(`row-${h}`) !== on) tr.classList.toggle(`row-${h}`, on);
  }
  if (tr.classList.contains("filter-error") !== (row.filterError !== "")) tr.classList.toggle("filter-error", row.filterError !== "");
  if (tr.title !== row.filterError) tr.title = row.filterError;
}

/** A column's value for row; a column that fails (a path over something huge, a bug) shows <error>, the others still show. */
function cellValue(c: Column, row: Row, now: number): string {
  try {
    return c.value(row.object, now);
  } catch (err) {
    console.error(`console: column ${c.name} of ${row.key}:`, err);
    return "<error>";
  }
}

function setText(el: HTMLElement, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}

// ---- The detail: YAML (or JSON) and the last change ----

let detailFormat: "yaml" | "json" = "yaml";

// A selected object that changes all the time would otherwise be written
// out, and diffed, at every render: the detail follows at most once a
// second (the last change wins), writes only the format shown, and not
// again for the same state.
const DETAIL_INTERVAL_MS = 1000;
let detailShownAt = -Infinity;
let detailTimer: ReturnType<typeof setTimeout> | null = null;
/** What the detail shows now: a state of a row in a format. */
let detailShown: { key: string; object: unknown; previous: unknown; format: string; managedFields: boolean; highlight: string | null } | null = null;

function scheduleDetail(): void {
  if (detailTimer !== null) return;
  const wait = detailShownAt + DETAIL_INTERVAL_MS - Date.now();
  if (wait <= 0) {
    refreshDetail();
    return;
  }
  detailTimer = setTimeout(() => {
    detailTimer = null;
    refreshDetail();
  }, wait);
}

function showDetail(key: string): void {
  detailShownAt = Date.now();
  const row = table.get(key);
  if (row === undefined) {
    ui.detail.hidden = true;
    detailShown = null;
    return;
  }
  const managedFields = ui.showManagedFields.checked;
  const d = detailShown;
  if (d !== null && d.key === key && d.object === row.object && d.previous === row.previous && d.format === detailFormat && d.managedFields === managedFields && d.highlight === row.highlight) return;
  detailShown = null;
  // Emptied first: if what follows fails, the pane shows no other object's text under this one's title.
  ui.detailYAML.textContent = "";
  ui.detailJSON.textContent = "";
  ui.detailDiff.replaceChildren();
  ui.detailFolded.hidden = true;
  ui.detail.hidden = false;
  ui.detail.dataset["key"] = `${row.namespace}/${row.name}`;
  ui.detailTitle.textContent = `${row.namespace ? row.namespace + "/" : ""}${row.name}${row.highlight === "deleted" ? " (deleted)" : ""}`;
  ui.detailFilterError.hidden = row.filterError === "";
  ui.detailFilterError.textContent = row.filterError && `The filter could not decide on this object: ${row.filterError}`;
  ui.detailYAML.hidden = detailFormat !== "yaml";
  ui.detailJSON.hidden = detailFormat !== "json";
  ui.viewYAML.setAttribute("aria-pressed", String(detailFormat === "yaml"));
  ui.viewJSON.setAttribute("aria-pressed", String(detailFormat === "json"));
  const render = detailFormat === "yaml" ? toYAML : pretty;
  try {
    const shown = managedFields ? row.object : withoutManagedFields(row.object);
    (detailFormat === "yaml" ? ui.detailYAML : ui.detailJSON).textContent = render(shown);
    if (row.previous === null) {
      ui.detailDiff.replaceChildren(document.createTextNode("no previous state"));
    } else {
      const change = changeOf(row.previous, row.object, render);
      // Appended one by one: a spread of many lines overflows the stack.
      if (!change.changed) ui.detailDiff.appendChild(Object.assign(document.createElement("span"), { className: "diff-skip", textContent: "only metadata changed\n" }));
      for (const l of change.lines) {
        const span = document.createElement("span");
        span.className = l.op === "+" ? "diff-add" : l.op === "-" ? "diff-del" : l.op === "…" ? "diff-skip" : "diff-same";
        span.textContent = l.op === "…" ? `  … ${l.text}\n` : `${l.op} ${l.text}\n`;
        ui.detailDiff.appendChild(span);
      }
      ui.detailFolded.hidden = change.folded === 0;
      ui.detailFolded.textContent = `${change.folded} line${change.folded === 1 ? "" : "s"} of metadata folded (managedFields, resourceVersion, generation)`;
      ui.detailFolded.dataset["folded"] = String(change.folded);
    }
    detailShown = { key, object: row.object, previous: row.previous, format: detailFormat, managedFields, highlight: row.highlight };
  } catch (err) {
    (detailFormat === "yaml" ? ui.detailYAML : ui.detailJSON).textContent = `The console could not show this object: ${err instanceof Error ? err.message : String(err)}`;
  }
}

function refreshDetail(): void {
  if (selectedKey !== null) showDetail(selectedKey);
}

ui.viewYAML.addEventListener("click", () => {
  detailFormat = "yaml";
  refreshDetail();
});
ui.viewJSON.addEventListener("click", () => {
  detailFormat = "json";
  refreshDetail();
});
ui.showManagedFields.addEventListener("change", refreshDetail);

// Highlights end and deleted rows go after a few seconds; ages move on.
setInterval(() => {
  const now = Date.now();
  for (const key of table.expire(now)) dirty.add(key);
  if (view.columns.some((c) => c.timed)) {
    for (const row of table.ordered()) {
      const tr = rowElements.get(row.key);
      if (tr !== undefined && !dirty.has(row.key)) updateRow(tr, row, now, true);
    }
  }
  if (dirty.size > 0) render();
}, 1000);

ui.copyToken.addEventListener("click", () => {
  // The clipboard API needs a secure context (https, or a loopback address);
  // elsewhere, select the token for the user to copy.
  if (navigator.clipboard === undefined) selectToken();
  else navigator.clipboard.writeText(lastToken).catch(selectToken);
});

function selectToken(): void {
  const range = document.createRange();
  range.selectNodeContents(ui.resumeToken);
  const selection = getSelection();
  selection?.removeAllRanges();
  selection?.addRange(range);
}

// ---- Start ----

refreshSignedIn();
if (getToken() !== "") {
  setStatus("idle");
  void loadResources();
  void loadNamespaces();
} else {
  setStatus("signed-out", "signed out");
}
