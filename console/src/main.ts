// The console: sign in, pick what to watch, and see the objects live. It
// talks to the hub that serves it (location.origin) with the Connect
// protocol, through the web client, whose watch resumes exactly by itself.
// Everything that comes from the hub or the cluster is written with
// textContent, never as HTML.

import {
  Code,
  createTransport,
  hubError,
  listResources,
  watch,
  type Resource,
  type ResumingWatch,
  type Selector,
  type WatchOptions,
} from "@informerhub/web";
import { lineDiff, pretty } from "./diff.js";
import { errorSummary, errorView } from "./errors.js";
import { ageOf, parseFields, resourceLabel } from "./format.js";
import { clearToken, getToken, setToken } from "./session.js";
import { ObjectTable, type Row } from "./table.js";

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
  resourceSelect: $("resource-select", HTMLSelectElement),
  refreshResources: $("refresh-resources-button", HTMLButtonElement),
  labelSelector: $("label-selector-input", HTMLInputElement),
  fieldSelector: $("field-selector-input", HTMLInputElement),
  selectableFields: $("selectable-fields", HTMLElement),
  resourcesNote: $("resources-note", HTMLElement),
  filter: $("filter-input", HTMLTextAreaElement),
  fields: $("fields-input", HTMLInputElement),
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
  body: $("objects-body", HTMLTableSectionElement),
  detail: $("detail", HTMLElement),
  detailTitle: $("detail-title", HTMLElement),
  detailFilterError: $("detail-filter-error", HTMLElement),
  detailDiff: $("detail-diff", HTMLElement),
  detailJSON: $("detail-json", HTMLElement),
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

function refreshSignedIn(): void {
  const signedIn = getToken() !== "";
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
});

ui.signoutButton.addEventListener("click", () => {
  stop();
  clearToken();
  resources = [];
  ui.resourcesNote.textContent = "";
  fillResources();
  table.clear();
  rowElements.clear();
  ui.body.replaceChildren();
  eventCount = 0;
  lastToken = "";
  selectedKey = null;
  clearError();
  showNotice("");
  refreshSignedIn();
  render();
  setStatus("signed-out", "signed out");
});

// ---- Resources ----

let resources: Resource[] = [];
let resourcesCall: AbortController | null = null;

async function loadResources(): Promise<void> {
  if (getToken() === "") return;
  resourcesCall?.abort();
  const call = new AbortController();
  resourcesCall = call;
  const namespace = ui.namespaceInput.value.trim();
  try {
    const listed = await listResources(transport, namespace, { signal: call.signal });
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
  showSelectableFields();
}

function selectedResource(): Resource | undefined {
  return resources[Number(ui.resourceSelect.value)];
}

function showSelectableFields(): void {
  const r = selectedResource();
  ui.selectableFields.textContent = r && r.selectableFields.length > 0 ? `fields: ${r.selectableFields.join(", ")}` : "";
}

ui.resourceSelect.addEventListener("change", showSelectableFields);
ui.namespaceInput.addEventListener("change", () => void loadResources());
ui.refreshResources.addEventListener("click", () => void loadResources());

// ---- The watch ----

const table = new ObjectTable();
const rowElements = new Map<string, HTMLTableRowElement>();
const dirty = new Set<string>();
let current: ResumingWatch | null = null;
let eventCount = 0;
let lastToken = "";
let selectedKey: string | null = null;
/** What the last watch asked for: Resume asks for the same. */
let lastQuery: { selector: Selector; options: WatchOptions } | null = null;

function query(): { selector: Selector; options: WatchOptions } | null {
  const r = selectedResource();
  if (r === undefined) return null;
  return {
    selector: {
      group: r.group,
      version: r.version,
      resource: r.resource,
      // A cluster-scoped resource has no namespace (the hub refuses one).
      namespace: r.namespaced ? ui.namespaceInput.value.trim() : "",
      labelSelector: ui.labelSelector.value.trim(),
      fieldSelector: ui.fieldSelector.value.trim(),
      filter: ui.filter.value.trim(),
    },
    options: { fields: parseFields(ui.fields.value), includePrevious: ui.includePrevious.checked },
  };
}

ui.queryForm.addEventListener("submit", (e) => {
  e.preventDefault();
  const q = query();
  if (q === null) return;
  stop();
  table.clear();
  rowElements.clear();
  ui.body.replaceChildren();
  selectedKey = null;
  eventCount = 0;
  lastToken = "";
  lastQuery = q;
  scheduleRender();
  void run(q.selector, { ...q.options, sendInitialEvents: true });
});

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
  void run(lastQuery.selector, { ...lastQuery.options, resumeToken: lastToken });
});

function stop(): void {
  current?.cancel();
  current = null;
  ui.stopButton.disabled = true;
}

async function run(selector: Selector, options: WatchOptions): Promise<void> {
  clearError();
  showNotice("");
  setStatus("connecting", "connecting…");
  ui.stopButton.disabled = false;
  ui.resumeButton.disabled = true;
  // Between an OUT_OF_RANGE and the end of the re-sync it causes.
  let resyncing = false;
  const resyncStatus = () => setStatus("resyncing", "re-syncing: the hub could no longer resume from the last token…");
  const w = watch(transport, selector, {
    ...options,
    onConnected: () => {
      if (current !== w) return;
      if (resyncing) resyncStatus();
      else if (table.isLive) setStatus("live");
      else setStatus("initial", "loading initial objects…");
    },
    onRetry: (err, failures) => {
      if (current !== w) return;
      if (hubError(err).code === Code.OutOfRange) {
        resyncing = true;
        resyncStatus();
      } else {
        setStatus("reconnecting", `reconnecting… (${errorSummary(err)}${failures > 1 ? `, attempt ${failures}` : ""})`);
      }
    },
  });
  current = w;
  try {
    for await (const event of w) {
      if (current !== w) break;
      const now = Date.now();
      if (event.type !== "BOOKMARK") eventCount++;
      lastToken = w.resumeToken;
      for (const key of table.apply(event, now)) dirty.add(key);
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
    }
    scheduleRender();
  }
}

// ---- Rendering ----

let renderPending = false;

/** Renders at most about 20 times a second, however fast events come. */
function scheduleRender(): void {
  if (renderPending) return;
  renderPending = true;
  setTimeout(() => {
    renderPending = false;
    render();
  }, 50);
}

function render(): void {
  const now = Date.now();
  const ordered = table.ordered();
  // Last row first: the row after a new one is then on the page already
  // (the table is sorted by key), so each insertion is one step.
  for (const key of [...dirty].sort().reverse()) {
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
    updateRow(tr, row, now);
  }
  if (selectedKey !== null && dirty.has(selectedKey)) showDetail(selectedKey);
  dirty.clear();
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
  for (let i = 0; i < 4; i++) tr.appendChild(document.createElement("td"));
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

function updateRow(tr: HTMLTableRowElement, row: Row, now: number): void {
  const cells = tr.cells;
  setText(cells[0]!, row.namespace);
  setText(cells[1]!, row.name);
  setText(cells[2]!, row.resourceVersion);
  setText(cells[3]!, ageOf(row.object.metadata?.creationTimestamp, now));
  tr.dataset["resourceVersion"] = row.resourceVersion;
  for (const h of ["added", "modified", "deleted"] as const) tr.classList.toggle(`row-${h}`, row.highlight === h);
  tr.classList.toggle("filter-error", row.filterError !== "");
  tr.title = row.filterError;
}

function setText(el: HTMLElement, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}

function showDetail(key: string): void {
  const row = table.get(key);
  if (row === undefined) {
    ui.detail.hidden = true;
    return;
  }
  ui.detail.hidden = false;
  ui.detail.dataset["key"] = `${row.namespace}/${row.name}`;
  ui.detailTitle.textContent = `${row.namespace ? row.namespace + "/" : ""}${row.name}${row.highlight === "deleted" ? " (deleted)" : ""}`;
  ui.detailFilterError.hidden = row.filterError === "";
  ui.detailFilterError.textContent = row.filterError && `The filter could not decide on this object: ${row.filterError}`;
  ui.detailJSON.textContent = pretty(row.object);
  if (row.previous === null) {
    ui.detailDiff.replaceChildren(document.createTextNode("no previous state"));
    return;
  }
  const lines = lineDiff(pretty(row.previous), pretty(row.object)).map((l) => {
    const span = document.createElement("span");
    span.className = l.op === "+" ? "diff-add" : l.op === "-" ? "diff-del" : "diff-same";
    span.textContent = `${l.op} ${l.text}\n`;
    return span;
  });
  ui.detailDiff.replaceChildren(...lines);
}

// Highlights end and deleted rows go after a few seconds; ages move on.
setInterval(() => {
  const now = Date.now();
  for (const key of table.expire(now)) dirty.add(key);
  for (const row of table.ordered()) {
    const tr = rowElements.get(row.key);
    if (tr !== undefined) setText(tr.cells[3]!, ageOf(row.object.metadata?.creationTimestamp, now));
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
} else {
  setStatus("signed-out", "signed out");
}
