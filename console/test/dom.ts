// Just enough of a DOM to run the console's main.ts in Node: elements
// created from index.html's ids, with what main.ts uses of them (text,
// classes, dataset, children, events, form controls). Not a browser: the
// chromedp tests of the hub drive a real one; this checks the console's
// logic end to end against a fake hub, without one.

type Listener = (event: FakeEvent) => void;

export interface FakeEvent {
  readonly type: string;
  readonly key?: string;
  preventDefault(): void;
}

class ClassList {
  private readonly names = new Set<string>();
  add(...names: string[]): void {
    for (const n of names) this.names.add(n);
  }
  remove(...names: string[]): void {
    for (const n of names) this.names.delete(n);
  }
  toggle(name: string, force?: boolean): boolean {
    const on = force ?? !this.names.has(name);
    if (on) this.names.add(name);
    else this.names.delete(name);
    return on;
  }
  contains(name: string): boolean {
    return this.names.has(name);
  }
  set value(v: string) {
    this.names.clear();
    for (const n of v.split(/\s+/)) if (n !== "") this.names.add(n);
  }
  get value(): string {
    return [...this.names].join(" ");
  }
}

export class HTMLElement {
  readonly tagName: string;
  id = "";
  hidden = false;
  disabled = false;
  title = "";
  tabIndex = -1;
  readonly dataset: Record<string, string> = {};
  readonly classList = new ClassList();
  children: HTMLElement[] = [];
  parentElement: HTMLElement | null = null;
  private text = "";
  private readonly listeners = new Map<string, Listener[]>();

  constructor(tagName = "div") {
    this.tagName = tagName.toUpperCase();
  }

  get className(): string {
    return this.classList.value;
  }
  set className(v: string) {
    this.classList.value = v;
  }
  get textContent(): string {
    return this.children.length > 0 ? this.children.map((c) => c.textContent).join("") : this.text;
  }
  set textContent(v: string) {
    this.replaceChildren();
    this.text = v;
  }

  readonly attributes = new Map<string, string>();
  setAttribute(name: string, value: string): void {
    this.attributes.set(name, value);
  }
  getAttribute(name: string): string | null {
    return this.attributes.get(name) ?? null;
  }

  addEventListener(type: string, listener: Listener): void {
    this.listeners.set(type, [...(this.listeners.get(type) ?? []), listener]);
  }
  /** Runs the listeners of type, as a user's action would. */
  dispatch(type: string, init: { key?: string } = {}): void {
    const event: FakeEvent = { type, ...init, preventDefault() {} };
    for (const l of this.listeners.get(type) ?? []) l(event);
  }

  appendChild<T extends HTMLElement>(child: T): T {
    return this.insertBefore(child, null);
  }
  insertBefore<T extends HTMLElement>(child: T, ref: HTMLElement | null): T {
    child.remove();
    const at = ref === null ? -1 : this.children.indexOf(ref);
    if (at < 0) this.children.push(child);
    else this.children.splice(at, 0, child);
    child.parentElement = this;
    this.text = "";
    return child;
  }
  remove(): void {
    const p = this.parentElement;
    if (p !== null) p.children = p.children.filter((c) => c !== this);
    this.parentElement = null;
  }
  replaceChildren(...nodes: HTMLElement[]): void {
    for (const c of [...this.children]) c.remove();
    this.text = "";
    for (const n of nodes) this.appendChild(n);
  }
  /** Only "tag.class", which is all main.ts asks. */
  querySelectorAll(selector: string): HTMLElement[] {
    const [tag, cls] = selector.split(".");
    const out: HTMLElement[] = [];
    const walk = (e: HTMLElement) => {
      for (const c of e.children) {
        if (c.tagName === tag!.toUpperCase() && (cls === undefined || c.classList.contains(cls))) out.push(c);
        walk(c);
      }
    };
    walk(this);
    return out;
  }
}

export class HTMLFormElement extends HTMLElement {}
export class HTMLButtonElement extends HTMLElement {}
export class HTMLUListElement extends HTMLElement {}
export class HTMLTextAreaElement extends HTMLElement {
  value = "";
}
export class HTMLInputElement extends HTMLElement {
  value = "";
  checked = false;
}
export class HTMLOptionElement extends HTMLElement {
  value = "";
}
export class HTMLSelectElement extends HTMLElement {
  private selected = 0;
  get options(): HTMLOptionElement[] {
    return this.children.filter((c): c is HTMLOptionElement => c instanceof HTMLOptionElement);
  }
  get selectedOptions(): HTMLOptionElement[] {
    const o = this.options[this.selected];
    return o === undefined ? [] : [o];
  }
  get value(): string {
    return this.selectedOptions[0]?.value ?? "";
  }
  set value(v: string) {
    this.selected = this.options.findIndex((o) => o.value === v);
  }
  override replaceChildren(...nodes: HTMLElement[]): void {
    super.replaceChildren(...nodes);
    this.selected = 0;
  }
}
export class HTMLTableRowElement extends HTMLElement {
  get cells(): HTMLElement[] {
    return this.children;
  }
}
export class HTMLTableSectionElement extends HTMLElement {
  get rows(): HTMLTableRowElement[] {
    return this.children.filter((c): c is HTMLTableRowElement => c instanceof HTMLTableRowElement);
  }
}

const classes: Record<string, new (tag: string) => HTMLElement> = {
  form: HTMLFormElement,
  button: HTMLButtonElement,
  ul: HTMLUListElement,
  textarea: HTMLTextAreaElement,
  input: HTMLInputElement,
  option: HTMLOptionElement,
  select: HTMLSelectElement,
  tr: HTMLTableRowElement,
  tbody: HTMLTableSectionElement,
};

function element(tag: string): HTMLElement {
  const C = classes[tag] ?? HTMLElement;
  return new C(tag);
}

/** A document with an element for every tag of html that has an id, its boolean and data- attributes set. */
export function fakeDocument(html: string) {
  const byId = new Map<string, HTMLElement>();
  for (const m of html.matchAll(/<(\w+)((?:\s+[\w-]+(?:="[^"]*")?)*)\s*>/g)) {
    const attrs = new Map([...m[2]!.matchAll(/([\w-]+)(?:="([^"]*)")?/g)].map((a) => [a[1]!, a[2] ?? ""]));
    const id = attrs.get("id");
    if (id === undefined) continue;
    const e = element(m[1]!);
    e.id = id;
    e.hidden = attrs.has("hidden");
    e.disabled = attrs.has("disabled");
    if (e instanceof HTMLInputElement) e.checked = attrs.has("checked");
    for (const [k, v] of attrs) {
      if (k.startsWith("data-")) e.dataset[k.slice(5).replace(/-(\w)/g, (_, c: string) => c.toUpperCase())] = v;
    }
    byId.set(id, e);
  }
  const listeners = new Map<string, (() => void)[]>();
  return {
    getElementById: (id: string) => byId.get(id) ?? null,
    createElement: element,
    createTextNode: (text: string) => Object.assign(new HTMLElement("#text"), { textContent: text }),
    /** "hidden" when the tab is in the background: set it, then dispatch "visibilitychange". */
    visibilityState: "visible" as "visible" | "hidden",
    addEventListener: (type: string, listener: () => void) => listeners.set(type, [...(listeners.get(type) ?? []), listener]),
    dispatch: (type: string) => {
      for (const l of listeners.get(type) ?? []) l();
    },
  };
}

/** Installs the DOM's globals that main.ts reads. */
export function installDOM(html: string, origin: string, fetch: typeof globalThis.fetch): { storage: Map<string, string> } {
  const storage = new Map<string, string>();
  const g = globalThis as Record<string, unknown>;
  Object.assign(g, {
    HTMLElement,
    HTMLFormElement,
    HTMLButtonElement,
    HTMLUListElement,
    HTMLTextAreaElement,
    HTMLInputElement,
    HTMLSelectElement,
    HTMLTableRowElement,
    HTMLTableSectionElement,
    document: fakeDocument(html),
    location: { origin },
    fetch,
    sessionStorage: {
      getItem: (k: string) => storage.get(k) ?? null,
      setItem: (k: string, v: string) => void storage.set(k, v),
      removeItem: (k: string) => void storage.delete(k),
    },
  });
  return { storage };
}
