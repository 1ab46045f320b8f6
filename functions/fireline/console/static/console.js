// Fireline console: plain modern JavaScript and SVG, no dependency, no build step.
// Everything shown comes from the JSON API as text (textContent, never innerHTML).
"use strict";

const BASE = location.pathname.replace(/\/console\/?$/, "");
const KEY = "fireline.apiKey";
const TENANT = "fireline.tenant";
const SVG = "http://www.w3.org/2000/svg";
const OCCURRENCE_STATES = ["queued", "running", "succeeded", "failed", "dead", "cancelled", "skipped"];
const JOB_STATES = ["scheduled", ...OCCURRENCE_STATES];
const NODE_STATES = ["waiting", "dispatched", "succeeded", "failed", "blocked", "cancelled"];
const RUN_STATES = ["running", "succeeded", "failed", "cancelled"];
const SCHEDULE_STATES = ["active", "paused", "completed", "cancelled"];
const CLASSES = ["default", "short", "long"];
const GRAPH_LIMIT = 150;
const COLORS = {
  succeeded: "#176b32", active: "#176b32", failed: "#a4161a", dead: "#a4161a",
  running: "#0b4fb3", dispatched: "#0b4fb3", queued: "#4b5563", waiting: "#4b5563",
  scheduled: "#4b5563", blocked: "#7a5500", paused: "#7a5500", cancelled: "#5f6368",
  skipped: "#5f6368", completed: "#5f6368",
};

const app = { who: null, timer: null, view: 0 };

// --- DOM -------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

function svg(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG, tag), attrs, children);
}

function fill(el, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "text") el.textContent = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function replace(el, ...children) {
  el.replaceChildren();
  fill(el, {}, children);
  return el;
}

function badge(state) {
  return h("span", { class: `badge s-${state}` }, state);
}

function say(message) {
  const box = document.getElementById("status");
  box.textContent = message;
  clearTimeout(say.timer);
  say.timer = setTimeout(() => { box.textContent = ""; }, 6000);
}

function select(label, id, options, value, onchange) {
  return h("div", { class: "field" },
    h("label", { for: id }, label),
    h("select", { id, onchange },
      h("option", { value: "" }, "any"),
      options.map((o) => h("option", { value: o, selected: o === value }, o))));
}

function table(headers, rows, empty) {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  return h("table", {},
    h("thead", {}, h("tr", {}, headers.map((t) => h("th", { scope: "col", class: t.endsWith("#") ? "num" : null }, t.replace(/#$/, ""))))),
    h("tbody", {}, rows));
}

// --- time ------------------------------------------------------------------------------

function when(iso) {
  if (!iso) return "—";
  return new Date(iso).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function ago(iso) {
  if (!iso) return "";
  const seconds = Math.round((new Date(iso) - Date.now()) / 1000);
  const size = Math.abs(seconds);
  const text = size < 90 ? `${size} s` : size < 5400 ? `${Math.round(size / 60)} min` : `${Math.round(size / 3600)} h`;
  return seconds >= 0 ? `in ${text}` : `${text} ago`;
}

function timeCell(iso) {
  return h("td", {}, h("time", { datetime: iso || "" }, when(iso)), iso ? h("div", { class: "muted" }, ago(iso)) : null);
}

function offsetIn(iso, zone) {
  try {
    const parts = new Intl.DateTimeFormat("en-US", { timeZone: zone, timeZoneName: "longOffset" }).formatToParts(new Date(iso));
    const name = parts.find((p) => p.type === "timeZoneName").value;
    return name === "GMT" ? "+00:00" : name.replace("GMT", "");
  } catch {
    return "";
  }
}

function localIn(iso, zone) {
  try {
    return new Intl.DateTimeFormat("en-GB", {
      timeZone: zone, weekday: "short", year: "numeric", month: "short", day: "2-digit",
      hour: "2-digit", minute: "2-digit", second: "2-digit",
    }).format(new Date(iso));
  } catch {
    return when(iso);
  }
}

function ms(value) {
  if (value === null || value === undefined) return "—";
  return value < 1000 ? `${Math.round(value)} ms` : `${+(value / 1000).toFixed(2)} s`;
}

// --- the API ---------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    const detail = body && body.error ? body.error : body || {};
    super(detail.message ? `${detail.message}${detail.field ? ` (${detail.field})` : ""}` : `the API answered ${status}`);
    this.status = status;
  }
}

async function api(method, path, body) {
  const url = new URL(BASE + path, location.origin);
  const viewing = sessionStorage.getItem(TENANT);
  if (app.who && app.who.role === "operator" && viewing && method === "GET") url.searchParams.set("tenant", viewing);
  const headers = { "x-api-key": sessionStorage.getItem(KEY) || "" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (response.status === 401 || (response.status === 403 && !app.who)) {
    signOut("The API refused this key. Check it and sign in again.");
    throw new ApiError(response.status, data);
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

async function every(path, cap = 1000) {
  const items = [];
  let cursor = null;
  do {
    const sep = path.includes("?") ? "&" : "?";
    const page = await api("GET", `${path}${sep}limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
    items.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor && items.length < cap);
  return items;
}

// For what a click or a filter starts and nothing awaits: a failure is said, not thrown.
function report(error) {
  say(`Failed: ${error.message}`);
}

async function act(label, run) {
  try {
    const done = await run();
    say(label);
    return done;
  } catch (error) {
    say(`Failed: ${error.message}`);
    return null;
  }
}

function confirmed(title, text, ok, danger = false) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  const button = document.getElementById("confirm-ok");
  button.textContent = ok;
  button.className = danger ? "danger" : "primary";
  dialog.returnValue = "";
  dialog.showModal();
  button.focus();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
  });
}

// --- sign-in ---------------------------------------------------------------------------

function signOut(error) {
  sessionStorage.removeItem(KEY);
  sessionStorage.removeItem(TENANT);
  app.who = null;
  stopTimer();
  document.getElementById("top").hidden = true;
  const input = h("input", { id: "api-key", type: "password", autocomplete: "off", required: true, "aria-describedby": "signin-help" });
  const main = document.getElementById("main");
  replace(main, h("section", { class: "signin", "aria-labelledby": "signin-title" },
    h("h1", { id: "signin-title" }, "Sign in to Fireline"),
    h("form", {
      onsubmit: async (event) => {
        event.preventDefault();
        sessionStorage.setItem(KEY, input.value.trim());
        await start();
      },
    },
    h("label", { for: "api-key" }, "API key"),
    input,
    h("p", { id: "signin-help", class: "muted" }, "Your tenant's API key, or an operator's. It stays in this tab's session storage."),
    error ? h("p", { id: "signin-error", class: "error", role: "alert" }, error) : null,
    h("button", { type: "submit", class: "primary" }, "Sign in"))));
  input.focus();
}

async function start() {
  try {
    app.who = await api("GET", "/whoami");
  } catch (error) {
    if (error.status !== 401 && error.status !== 403) signOut(`Could not reach the API: ${error.message}`);
    return;
  }
  document.getElementById("top").hidden = false;
  await renderWho();
  if (!location.hash || location.hash === "#/") location.hash = "#/overview";
  else route();
}

async function renderWho() {
  const box = document.getElementById("who");
  const out = h("button", { type: "button", onclick: () => signOut(null) }, "Sign out");
  if (app.who.role !== "operator") {
    replace(box, h("span", {}, "Tenant ", h("strong", { id: "tenant-name" }, app.who.tenant_id)), out);
    return;
  }
  app.tenants = (await api("GET", "/tenants")).items;
  // No tenant is chosen for the operator: the first by name is often its own, empty one.
  const current = app.tenants.includes(sessionStorage.getItem(TENANT)) ? sessionStorage.getItem(TENANT) : "";
  if (!current) sessionStorage.removeItem(TENANT);
  replace(box,
    h("span", { class: "badge s-paused" }, "operator · read-only"),
    h("label", { for: "tenant-pick" }, "Tenant"),
    h("select", { id: "tenant-pick", onchange: (event) => pickTenant(event.target.value) },
      h("option", { value: "", disabled: true, selected: !current }, "pick a tenant"),
      app.tenants.map((t) => h("option", { value: t, selected: t === current }, t))),
    out);
}

function pickTenant(tenant) {
  sessionStorage.setItem(TENANT, tenant);
  document.getElementById("tenant-pick").value = tenant;
  route();
}

function mustPickTenant() {
  return app.who && app.who.role === "operator" && !sessionStorage.getItem(TENANT);
}

async function pickTenantPage(page) {
  page.main.append(h("h1", {}, "Pick a tenant"),
    h("p", { class: "sub" }, "An operator's key reads any tenant's schedules, jobs, dead letters and workflows, and changes nothing. Which tenant's?"),
    app.tenants.length
      ? h("ul", { class: "choices", "aria-label": "tenants" }, app.tenants.map((t) => h("li", {},
        h("button", { type: "button", onclick: () => pickTenant(t) }, t))))
      : h("p", { class: "empty" }, "No tenant has an API key yet."));
}

function writable() {
  return app.who && app.who.role !== "operator";
}

// --- routing ---------------------------------------------------------------------------

const ROUTES = [
  [/^#\/overview$/, overviewPage, "#/overview"],
  [/^#\/schedules$/, schedulesPage, "#/schedules"],
  [/^#\/schedules\/([\w-]+)$/, schedulePage, "#/schedules"],
  [/^#\/jobs$/, jobsPage, "#/jobs"],
  [/^#\/dead-letters$/, deadLettersPage, "#/dead-letters"],
  [/^#\/workflows$/, workflowsPage, "#/workflows"],
  [/^#\/workflows\/([\w-]+)$/, workflowPage, "#/workflows"],
  [/^#\/runs\/([\w-]+)$/, runPage, "#/workflows"],
  [/^#\/runs\/([\w-]+)\/nodes\/([^/]+)$/, runPage, "#/workflows"],
];
const NOT_FOUND = [null, notFoundPage, null];
const PICK_TENANT = [null, pickTenantPage, null];

function stopTimer() {
  clearInterval(app.timer);
  app.timer = null;
}

function route() {
  if (!app.who) return;
  stopTimer();
  const view = ++app.view;
  const known = ROUTES.find(([pattern]) => pattern.test(location.hash));
  const found = mustPickTenant() ? PICK_TENANT : known || NOT_FOUND;
  const args = (found[0] && location.hash.match(found[0])) || [];
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.getAttribute("href") === found[2]) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const main = document.getElementById("main");
  main.replaceChildren();
  const page = { main, live: () => view === app.view };
  found[1](page, ...args.slice(1).map(decodeURIComponent)).catch((error) => {
    if (page.live()) main.append(h("p", { class: "error", role: "alert" }, `Could not load this page: ${error.message}`));
  });
  main.focus();
}

async function notFoundPage(page) {
  page.main.append(h("h1", {}, "Page not found"),
    h("p", {}, "The console has no page at ", h("code", {}, location.hash), "."),
    h("p", {}, h("a", { href: "#/overview" }, "Go to the overview")));
}

function poll(page, seconds, refresh) {
  app.timer = setInterval(() => {
    if (page.live() && !document.querySelector("dialog[open]")) refresh().catch(() => {});
  }, seconds * 1000);
}

// --- charts ----------------------------------------------------------------------------

function niceStep(raw) {
  const power = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 2.5, 5, 10].map((m) => m * power).find((step) => step >= raw);
}

function lineChart(title, series, format, from, to) {
  const width = 1000, height = 240, left = 70, right = 16, top = 12, bottom = 34;
  const points = series.flatMap((s) => s.points);
  const chart = svg("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title });
  const x0 = from, x1 = Math.max(to, from + 60000);
  const step = niceStep(Math.max(1, ...points.map((p) => p[1])) / 4);
  const y1 = step * Math.max(1, Math.ceil(Math.max(1, ...points.map((p) => p[1])) / step));
  const x = (t) => left + ((t - x0) / (x1 - x0)) * (width - left - right);
  const y = (v) => top + (1 - v / y1) * (height - top - bottom);
  if (points.length) {
    for (let v = 0; v <= y1 + step / 2; v += step) {
      chart.append(svg("line", { class: "gridline", x1: left, x2: width - right, y1: y(v), y2: y(v) }));
      chart.append(svg("text", { x: left - 6, y: y(v) + 4, "text-anchor": "end" }, format(v)));
    }
  } else {
    // Nothing to scale: an axis of "1 ms, 1 ms, 0 ms" would be made up.
    chart.setAttribute("aria-label", `${title}: no data`);
    chart.append(svg("text", { class: "no-data", x: width / 2, y: height / 2 - 6, "text-anchor": "middle" }, "no data"));
    chart.append(svg("text", { class: "muted", x: width / 2, y: height / 2 + 16, "text-anchor": "middle" }, "nothing fired in this window"));
  }
  for (let i = 0; i <= 4; i++) {
    const t = x0 + ((x1 - x0) * i) / 4;
    chart.append(svg("text", { x: x(t), y: height - 12, "text-anchor": "middle" }, new Date(t).toISOString().slice(11, 16)));
  }
  chart.append(svg("line", { class: "axis", x1: left, x2: left, y1: top, y2: height - bottom }));
  chart.append(svg("line", { class: "axis", x1: left, x2: width - right, y1: height - bottom, y2: height - bottom }));
  for (const s of series) {
    if (!s.points.length) continue;
    const d = s.points.map((p, i) => `${i ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
    chart.append(svg("path", { d, fill: "none", stroke: s.color, "stroke-width": 2, "stroke-dasharray": s.dash || null }));
    for (const p of s.points) {
      chart.append(svg("circle", { cx: x(p[0]), cy: y(p[1]), r: 2.5, fill: s.color },
        svg("title", {}, `${s.name} ${new Date(p[0]).toISOString().slice(11, 16)}: ${format(p[1])}`)));
    }
  }
  return chart;
}

function bars(counts, label) {
  const max = Math.max(1, ...Object.values(counts));
  return h("div", { class: "bars", role: "list", "aria-label": label },
    Object.entries(counts).map(([state, n]) => {
      const bar = h("div", { class: `bar s-${state}`, "aria-hidden": "true" });
      // Set through the CSSOM: the page's policy allows no inline style attribute.
      bar.style.width = `${Math.max(0.5, (100 * n) / max)}%`;
      return h("div", { class: "bar-row", role: "listitem" },
        h("span", { class: "bar-label" }, badge(state)),
        h("div", { class: "bar-track" }, bar),
        h("span", { class: "num", "data-state": state }, String(n)));
    }));
}

// --- overview --------------------------------------------------------------------------

async function overviewPage(page) {
  const body = h("div", {});
  page.main.append(h("h1", {}, "Overview"), h("p", { class: "sub" }, "The last hour, refreshed every 5 seconds."), body);
  const refresh = async () => {
    const o = await api("GET", "/overview");
    if (!page.live()) return;
    const lag = o.lag.map((p) => ({ ...p, t: new Date(p.minute).getTime() }));
    const series = [
      { name: "start lag p50", color: "#0b4fb3", points: lag.filter((p) => p.start_p50_ms !== null).map((p) => [p.t, p.start_p50_ms]) },
      { name: "start lag p99", color: "#0b4fb3", dash: "6 4", points: lag.filter((p) => p.start_p99_ms !== null).map((p) => [p.t, p.start_p99_ms]) },
      { name: "enqueue lag p50", color: "#a4161a", points: lag.filter((p) => p.enqueue_p50_ms !== null).map((p) => [p.t, p.enqueue_p50_ms]) },
      { name: "enqueue lag p99", color: "#a4161a", dash: "6 4", points: lag.filter((p) => p.enqueue_p99_ms !== null).map((p) => [p.t, p.enqueue_p99_ms]) },
    ];
    replace(body,
      h("div", { class: "grid" },
        h("section", { class: "card", "aria-labelledby": "h-classes" },
          h("h2", { id: "h-classes" }, "This tenant's work by class"),
          table(["Class", "Backlog#", "In flight#"], o.classes.map((c) => h("tr", {},
            h("td", {}, c.job_class), h("td", { class: "num" }, c.backlog), h("td", { class: "num" }, c.in_flight))), "no classes")),
        // An operator's key also sees the class queues themselves: every tenant's messages.
        o.queues ? h("section", { class: "card", "aria-labelledby": "h-queues" },
          h("h2", { id: "h-queues" }, "Deployment queues (every tenant)"),
          table(["Class", "Ready#", "Delayed#", "In flight#"], o.queues.map((q) => h("tr", {},
            h("td", {}, q.job_class), h("td", { class: "num" }, q.ready), h("td", { class: "num" }, q.delayed),
            h("td", { class: "num" }, q.in_flight))), "no queues")) : null,
        h("section", { class: "card", "aria-labelledby": "h-states" },
          h("h2", { id: "h-states" }, "Occurrences of schedules and jobs, fired in the last hour"),
          bars(o.occurrences, "occurrences by state"),
          h("p", { class: "muted" }, "A workflow's nodes are counted on its runs' pages.")),
        h("section", { class: "card", "aria-labelledby": "h-dead" },
          h("h2", { id: "h-dead" }, "Dead letters"),
          h("p", { class: "big", id: "dead-count" }, `${o.dead_letters}${o.capped ? "+" : ""}`),
          h("p", { class: "muted" }, "waiting for a redrive, whenever they died:"),
          h("ul", { class: "sources", "aria-label": "dead letters by source" },
            Object.entries(o.dead_letters_by_source || {}).map(([source, n]) => h("li", {},
              h("span", { class: "num", "data-count": source }, String(n)), ` of ${source}`))),
          h("a", { href: "#/dead-letters" }, "Review and redrive"),
          h("p", { class: "muted" }, `${o.schedules} schedules read.`))),
      h("section", { class: "card", "aria-labelledby": "h-lag" },
        h("h2", { id: "h-lag" }, "Enqueue and start lag, per minute of fire time"),
        lineChart("Lag per minute: p50 solid, p99 dashed; start lag blue, enqueue lag red", series, ms,
          new Date(o.since).getTime(), new Date(o.generated_at).getTime()),
        h("div", { class: "legend" }, series.map((s) => h("span", {},
          svg("svg", { width: 22, height: 8, "aria-hidden": "true" }, svg("line", { x1: 0, x2: 22, y1: 4, y2: 4, stroke: s.color, "stroke-width": 2, "stroke-dasharray": s.dash || null })),
          ` ${s.name}`))),
        h("details", {}, h("summary", {}, "Lag figures as a table"),
          table(["Minute", "Fires#", "Start p50#", "Start p99#", "Enqueue p50#", "Enqueue p99#"], lag.map((p) => h("tr", {},
            h("td", {}, when(p.minute)), h("td", { class: "num" }, p.count), h("td", { class: "num" }, ms(p.start_p50_ms)),
            h("td", { class: "num" }, ms(p.start_p99_ms)), h("td", { class: "num" }, ms(p.enqueue_p50_ms)),
            h("td", { class: "num" }, ms(p.enqueue_p99_ms)))), "no fires in this window"))),
      h("section", { class: "card", "aria-labelledby": "h-tickers" },
        h("h2", { id: "h-tickers" }, "Ticker groups and lease holders"),
        table(["Group", "Lease", "Holder", "Token#", "Expires"], o.tickers.map((t) => h("tr", {},
          h("td", {}, t.group), h("td", { class: "mono" }, t.lease), h("td", { class: "mono" }, t.holder || "none"),
          h("td", { class: "num" }, t.token ?? "—"), timeCell(t.expires_at))), "no ticker lease read")));
  };
  await refresh();
  poll(page, 5, refresh);
}

// --- schedules -------------------------------------------------------------------------

function targetText(target) {
  if (!target) return "";
  const named = target.handler || target.url || target.function || target.queue || target.workflow_id || "";
  return `${target.type}${named ? ` · ${named}` : ""}`;
}

async function limited(items, work, width = 6) {
  const queue = [...items];
  await Promise.all(Array.from({ length: width }, async () => {
    while (queue.length) await work(queue.shift());
  }));
}

async function schedulesPage(page) {
  const all = await every("/schedules");
  if (!page.live()) return;
  const filters = { q: "", state: "", job_class: "", type: "" };
  const types = [...new Set(all.map((s) => s.target.type))].sort();
  const extras = new Map();
  const list = h("div", {});
  const draw = () => {
    const q = filters.q.toLowerCase();
    const shown = all.filter((s) =>
      (!q || `${s.id} ${s.description} ${s.spec}`.toLowerCase().includes(q)) &&
      (!filters.state || s.state === filters.state) &&
      (!filters.job_class || s.job_class === filters.job_class) &&
      (!filters.type || s.target.type === filters.type));
    replace(list,
      h("p", { class: "muted", "aria-live": "polite" }, `${shown.length} of ${all.length} schedules`),
      table(["Schedule", "Description", "State", "Class", "Target", "Next fires", "Last outcome"], shown.map((s) => h("tr", { "data-id": s.id },
        h("td", {}, h("a", { href: `#/schedules/${s.id}` }, s.id), h("div", { class: "mono muted" }, s.spec)),
        h("td", {}, s.description),
        h("td", {}, badge(s.state)),
        h("td", {}, s.job_class),
        h("td", {}, targetText(s.target)),
        h("td", { class: "next" }, s.next_fire ? when(s.next_fire) : "—"),
        h("td", { class: "last" }, h("span", { class: "muted" }, "…")))), "No schedule matches."));
    limited(shown, async (s) => {
      // Read once per schedule for this page: filtering again redraws from what was read.
      if (!extras.has(s.id)) {
        extras.set(s.id, Promise.all([
          api("GET", `/schedules/${s.id}/occurrences?limit=1`),
          s.state === "active" ? api("GET", `/schedules/${s.id}/preview?count=3`) : null,
        ]));
      }
      const [history, preview] = await extras.get(s.id);
      if (!page.live()) return;
      const row = list.querySelector(`tr[data-id="${s.id}"]`);
      if (!row) return;
      const last = history.items[0];
      replace(row.querySelector(".last"), last ? [badge(last.state), h("div", { class: "muted" }, ago(last.fire_time))] : h("span", { class: "muted" }, "never fired"));
      if (preview) replace(row.querySelector(".next"), preview.fire_times.map((t) => h("div", {}, when(t))));
    }).catch(() => {});
  };
  const on = (name) => (event) => { filters[name] = event.target.value; draw(); };
  page.main.append(
    h("h1", {}, "Schedules"),
    h("form", { class: "filters", role: "search", onsubmit: (e) => e.preventDefault() },
      h("div", { class: "field" }, h("label", { for: "f-q" }, "Search"),
        h("input", { id: "f-q", type: "search", placeholder: "id, description or spec", oninput: on("q") })),
      select("State", "f-state", SCHEDULE_STATES, "", on("state")),
      select("Class", "f-class", CLASSES, "", on("job_class")),
      select("Target type", "f-type", types, "", on("type"))),
    list);
  draw();
}

// A schedule's past fires over a range, run again a few at a time (POST .../backfill); the
// dialog then shows the backfill's progress, refreshed on request, and can cancel it.
function backfillDialog(s, changed) {
  const dialog = h("dialog", { "aria-labelledby": "backfill-title" });
  const field = (label, name, input) => h("div", { class: "field" }, h("label", { for: `b-${name}` }, label), input);
  const from = h("input", { id: "b-from", type: "datetime-local", step: "1", required: true });
  const to = h("input", { id: "b-to", type: "datetime-local", step: "1", required: true });
  const overlap = h("select", { id: "b-overlap" },
    h("option", { value: "" }, "the schedule's (default)"),
    ["allow", "buffer_all"].map((v) => h("option", { value: v }, v)));
  const problem = h("p", { class: "error", role: "alert" });
  const progress = h("div", { role: "status", "aria-live": "polite" });
  let started = null;
  const path = () => `/schedules/${s.id}/backfill/${started.id}`;
  const show = (b) => {
    started = b;
    replace(progress, h("dl", { class: "details" },
      h("dt", {}, "Backfill"), h("dd", { class: "mono" }, b.id),
      h("dt", {}, "State"), h("dd", {}, badge(b.state)),
      h("dt", {}, "Fires"), h("dd", {}, `${b.fires}: ${b.created} created, ${b.existed} existed (not run again)`),
      h("dt", {}, "Progress"), h("dd", {}, `${b.run} run, ${b.in_flight} in flight, ${b.left} left, ${b.cancelled} cancelled`)),
      h("div", { class: "actions" },
        h("button", { type: "button", onclick: () => api("GET", path()).then(show).catch((e) => { problem.textContent = e.message; }) }, "Refresh"),
        b.state === "running" ? h("button", { type: "button", class: "danger", onclick: () => api("DELETE", path()).then((d) => { show(d); changed(); }).catch((e) => { problem.textContent = e.message; }) }, "Cancel backfill") : null));
  };
  // The inputs read as UTC, as the preview's does.
  const utc = (value) => (value ? new Date(`${value}Z`).toISOString().replace(".000Z", "Z") : value);
  dialog.append(h("form", { class: "edit", method: "dialog", onsubmit: async (event) => {
    event.preventDefault();
    problem.textContent = "";
    const body = { from: utc(from.value), to: utc(to.value) };
    if (overlap.value) body.overlap = overlap.value;
    try {
      show(await api("POST", `/schedules/${s.id}/backfill`, body));
    } catch (error) { problem.textContent = error.message; return; }
    say(`Backfill of ${s.id} started`);
    changed();
  } },
    h("h2", { id: "backfill-title" }, `Backfill ${s.id}`),
    h("p", { class: "sub" }, "Runs the schedule's fires from the first time to the second (excluded, not after now) that have no occurrence yet, a few at a time."),
    field("From (UTC)", "from", from), field("To (UTC)", "to", to), field("Overlap", "overlap", overlap),
    problem, progress,
    h("div", { class: "actions" },
      h("button", { type: "button", onclick: () => dialog.close() }, "Close"),
      h("button", { type: "submit", class: "primary" }, "Start backfill"))));
  dialog.addEventListener("close", () => dialog.remove());
  document.body.append(dialog);
  dialog.showModal();
  from.focus();
}

async function schedulePage(page, id) {
  const head = h("div", {});
  const details = h("div", {});
  const preview = h("div", {});
  const ledger = h("div", {});
  let stateFilter = "";
  let after = "";
  page.main.append(head,
    h("section", { "aria-labelledby": "h-spec" }, h("h2", { id: "h-spec" }, "Definition"), details),
    h("section", { "aria-labelledby": "h-preview" }, h("h2", { id: "h-preview" }, "Next fires"),
      h("form", { class: "filters", onsubmit: (e) => { e.preventDefault(); } },
        h("div", { class: "field" }, h("label", { for: "p-after" }, "Preview after (UTC)"),
          h("input", { id: "p-after", type: "datetime-local", onchange: (e) => { after = e.target.value; drawPreview().catch(report); } }))),
      preview),
    h("section", { "aria-labelledby": "h-ledger" }, h("h2", { id: "h-ledger" }, "Occurrence ledger"),
      h("form", { class: "filters", onsubmit: (e) => e.preventDefault() },
        select("State", "l-state", OCCURRENCE_STATES, "", (e) => { stateFilter = e.target.value; drawLedger().catch(report); })),
      ledger));
  let s = await api("GET", `/schedules/${id}`);
  const drawHead = () => {
    const buttons = [];
    if (writable()) {
      if (s.state === "active") buttons.push(h("button", { type: "button", onclick: () => change("pause", "Pause", `Pause ${s.id}? It leaves the due index until resumed.`) }, "Pause"));
      if (s.state === "paused") buttons.push(h("button", { type: "button", onclick: () => change("resume", "Resume", `Resume ${s.id}? Missed fires follow its misfire policy (${s.misfire.policy}).`) }, "Resume"));
      buttons.push(h("button", { type: "button", onclick: trigger }, "Trigger now"));
      buttons.push(h("button", { type: "button", onclick: () => backfillDialog(s, () => drawLedger().catch(report)) }, "Backfill…"));
      buttons.push(h("button", { type: "button", onclick: edit }, "Edit"));
      buttons.push(h("button", { type: "button", class: "danger", onclick: remove }, "Delete"));
    }
    replace(head,
      h("p", {}, h("a", { href: "#/schedules" }, "← Schedules")),
      h("h1", {}, `Schedule ${s.id} `, badge(s.state)),
      h("p", { class: "sub" }, s.description),
      h("div", { class: "toolbar", role: "group", "aria-label": "Actions" }, buttons));
    replace(details, h("dl", { class: "details" },
      h("dt", {}, "Spec"), h("dd", { class: "mono" }, s.spec),
      h("dt", {}, "Time zone"), h("dd", {}, s.timezone),
      h("dt", {}, "DST policy"), h("dd", {}, `in a gap (clocks forward): ${s.dst.gap}; in a repeat (clocks back): ${s.dst.repeat}`),
      h("dt", {}, "Next fire"), h("dd", {}, `${when(s.next_fire)} ${s.next_fire ? `(${ago(s.next_fire)})` : ""}`),
      h("dt", {}, "Class"), h("dd", {}, s.job_class),
      h("dt", {}, "Target"), h("dd", {}, targetText(s.target)),
      h("dt", {}, "Retry"), h("dd", {}, `${s.retry.max_attempts} attempts, backoff ${s.retry.base_seconds} s × ${s.retry.factor} up to ${s.retry.cap_seconds} s`),
      h("dt", {}, "Misfire"), h("dd", {}, `${s.misfire.policy} (grace ${s.misfire.grace_seconds} s)`),
      h("dt", {}, "Overlap"), h("dd", {}, s.overlap),
      h("dt", {}, "Version"), h("dd", {}, `${s.version}, updated ${when(s.updated_at)}`)));
  };
  const change = async (verb, label, text) => {
    if (!(await confirmed(`${label} schedule?`, text, label))) return;
    const done = await act(`${label}d ${s.id}`, () => api("POST", `/schedules/${s.id}/${verb}`));
    if (done) { s = done; drawHead(); drawPreview().catch(report); }
  };
  async function trigger() {
    if (!(await confirmed("Trigger now?", `Fire ${s.id} now, through the same path as a scheduled fire.`, "Trigger"))) return;
    const fired = await act(`Triggered ${s.id}`, () => api("POST", `/schedules/${s.id}/trigger`));
    if (fired) drawLedger().catch(report);
  }
  async function remove() {
    if (!(await confirmed("Delete schedule?", `Delete ${s.id}? It stops firing; its history stays until it expires.`, "Delete", true))) return;
    if (await act(`Deleted ${s.id}`, () => api("DELETE", `/schedules/${s.id}`)) !== null) location.hash = "#/schedules";
  }
  async function edit() {
    const dialog = h("dialog", { "aria-labelledby": "edit-title" });
    const field = (label, name, input) => h("div", { class: "field" }, h("label", { for: `e-${name}` }, label), input);
    const spec = h("input", { id: "e-spec", value: s.spec, required: true });
    const zone = h("input", { id: "e-zone", value: s.timezone, required: true });
    const gap = h("select", { id: "e-gap" }, ["shift", "skip"].map((v) => h("option", { value: v, selected: v === s.dst.gap }, v)));
    const repeat = h("select", { id: "e-repeat" }, ["first", "last", "both"].map((v) => h("option", { value: v, selected: v === s.dst.repeat }, v)));
    const jobClass = h("select", { id: "e-class" }, CLASSES.map((v) => h("option", { value: v, selected: v === s.job_class }, v)));
    const overlap = h("select", { id: "e-overlap" }, ["allow", "forbid", "buffer_one"].map((v) => h("option", { value: v, selected: v === s.overlap }, v)));
    const payload = h("textarea", { id: "e-payload" }, JSON.stringify(s.payload, null, 2));
    const problem = h("p", { class: "error", role: "alert" });
    dialog.append(h("form", { class: "edit", method: "dialog", onsubmit: async (event) => {
      event.preventDefault();
      let parsed;
      try { parsed = JSON.parse(payload.value || "{}"); } catch { problem.textContent = "The payload is not JSON."; return; }
      const body = {
        spec: spec.value, timezone: zone.value, dst: { gap: gap.value, repeat: repeat.value },
        start: s.start, end: s.end, job_class: jobClass.value, target: s.target, payload: parsed,
        retry: s.retry, misfire: s.misfire, overlap: overlap.value, jitter_seconds: s.jitter_seconds,
        deadline_seconds: s.deadline_seconds,
      };
      try {
        s = await api("PUT", `/schedules/${s.id}`, body);
      } catch (error) { problem.textContent = error.message; return; }
      dialog.close();
      say(`Saved ${s.id} as version ${s.version}`);
      drawHead(); drawPreview().catch(report);
    } },
      h("h2", { id: "edit-title" }, `Edit ${s.id}`),
      field("Spec", "spec", spec), field("Time zone", "zone", zone),
      field("DST gap", "gap", gap), field("DST repeat", "repeat", repeat),
      field("Class", "class", jobClass), field("Overlap", "overlap", overlap),
      field("Payload (JSON)", "payload", payload), problem,
      h("div", { class: "actions" },
        h("button", { type: "button", onclick: () => dialog.close() }, "Cancel"),
        h("button", { type: "submit", class: "primary" }, "Save"))));
    dialog.addEventListener("close", () => dialog.remove());
    document.body.append(dialog);
    dialog.showModal();
    spec.focus();
  }
  async function drawPreview() {
    const instant = after ? new Date(`${after}Z`) : null;
    const query = instant && !Number.isNaN(instant.getTime()) ? `&after=${encodeURIComponent(instant.toISOString())}` : "";
    let p;
    try {
      p = await api("GET", `/schedules/${id}/preview?count=20${query}`);
    } catch (error) {
      replace(preview, h("p", { class: "error" }, error.message));
      return;
    }
    if (!page.live()) return;
    let previous = null;
    replace(preview,
      s.state === "paused" ? h("p", { class: "muted" }, "Paused: these are the fires it makes once resumed.") : null,
      table([`In ${p.timezone}`, "UTC", "Offset", "Queued", "Runs"], p.fires.map((f) => {
        const offset = offsetIn(f.fire_time, p.timezone);
        const changed = previous !== null && offset !== previous;
        const mark = changed ? h("span", { class: "dst" }, `DST ${previous} → ${offset}`) : null;
        const row = h("tr", { class: changed ? "dst-row" : null, "data-excluded": f.excluded || null },
          h("td", {}, localIn(f.fire_time, p.timezone), mark),
          h("td", {}, when(f.fire_time)), h("td", { class: "mono" }, offset),
          h("td", {}, f.queued ? (f.sent_at ? `sent ${when(f.sent_at)}` : "yes") : ""),
          h("td", {}, f.excluded ? badge(f.excluded) : "yes", skipButton(f)));
        previous = offset;
        return row;
      }), "No fire to come."));
  }
  // One upcoming fire skipped, or its skip taken back: each a new version of the schedule.
  function skipButton(f) {
    if (!writable() || s.state !== "active" || f.excluded === "excluded" || new Date(f.fire_time) <= new Date()) return null;
    const skipped = f.excluded === "skipped";
    const run = () => api(skipped ? "DELETE" : "POST",
      skipped ? `/schedules/${s.id}/skip?fire_time=${encodeURIComponent(f.fire_time)}` : `/schedules/${s.id}/skip`,
      skipped ? undefined : { fire_time: f.fire_time });
    return h("button", { type: "button", class: "skip", onclick: async () => {
      const done = await act(`${skipped ? "Unskipped" : "Skipped"} ${when(f.fire_time)}`, run);
      if (done) { s = done; drawHead(); drawPreview().catch(report); }
    } }, skipped ? "Unskip" : "Skip");
  }
  async function drawLedger() {
    const page1 = await api("GET", `/schedules/${id}/occurrences?limit=100${stateFilter ? `&state=${stateFilter}` : ""}`);
    if (!page.live()) return;
    const rows = page1.items;
    replace(ledger,
      timeline(rows),
      table(["Fire time", "State", "Attempts#", "Exit reason", "Duration#", "Started"], rows.map((o) => h("tr", { "data-state": o.state },
        timeCell(o.fire_time), h("td", {}, badge(o.state)), h("td", { class: "num" }, o.attempts),
        h("td", {}, o.exit_reason || "—"), h("td", { class: "num" }, o.duration_seconds === null ? "—" : `${o.duration_seconds.toFixed(2)} s`),
        h("td", {}, when(o.started_at)))), "No occurrence yet."));
  }
  drawHead();
  await Promise.all([drawPreview(), drawLedger()]);
  poll(page, 3, async () => {
    s = await api("GET", `/schedules/${id}`);
    if (page.live()) { drawHead(); await drawLedger(); }
  });
}

function timeline(rows) {
  if (!rows.length) return null;
  const states = OCCURRENCE_STATES.filter((st) => rows.some((o) => o.state === st));
  const width = 900, lane = 22, left = 90, right = 16, top = 8;
  const height = top + lane * states.length + 26;
  const times = rows.map((o) => new Date(o.fire_time).getTime());
  const t0 = Math.min(...times), t1 = Math.max(...times, t0 + 60000);
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (width - left - right);
  const chart = svg("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `Timeline of ${rows.length} occurrences: ${states.map((st) => `${rows.filter((o) => o.state === st).length} ${st}`).join(", ")}` });
  states.forEach((st, i) => {
    const y = top + lane * i + lane / 2;
    chart.append(svg("text", { x: left - 8, y: y + 4, "text-anchor": "end" }, st));
    chart.append(svg("line", { class: "gridline", x1: left, x2: width - right, y1: y, y2: y }));
  });
  for (const o of rows) {
    const y = top + lane * states.indexOf(o.state) + lane / 2;
    chart.append(svg("circle", { cx: x(new Date(o.fire_time).getTime()), cy: y, r: 5, fill: COLORS[o.state], class: "occ" },
      svg("title", {}, `${when(o.fire_time)} ${o.state} (${o.attempts} attempts)${o.exit_reason ? `: ${o.exit_reason}` : ""}`)));
  }
  const base = top + lane * states.length + 16;
  chart.append(svg("text", { x: left, y: base }, when(new Date(t0).toISOString())));
  chart.append(svg("text", { x: width - right, y: base, "text-anchor": "end" }, when(new Date(t1).toISOString())));
  return chart;
}

// --- jobs and dead letters -------------------------------------------------------------

async function jobsPage(page) {
  let state = "";
  const list = h("div", {});
  page.main.append(h("h1", {}, "Jobs"),
    h("form", { class: "filters", onsubmit: (e) => e.preventDefault() },
      select("State", "j-state", JOB_STATES, "", (e) => { state = e.target.value; draw().catch(report); })),
    list);
  async function draw() {
    const jobs = await every(`/jobs${state ? `?state=${state}` : ""}`, 300);
    if (!page.live()) return;
    replace(list, table(["Job", "State", "Run at", "Class", "Target", "Attempts#", "Exit reason", ""], jobs.map((j) => h("tr", {},
      h("td", { class: "mono" }, j.id), h("td", {}, badge(j.state)), timeCell(j.run_at), h("td", {}, j.job_class),
      h("td", {}, targetText(j.target)), h("td", { class: "num" }, j.occurrence ? j.occurrence.attempts : 0),
      h("td", {}, j.occurrence && j.occurrence.exit_reason ? j.occurrence.exit_reason : "—"),
      h("td", {}, writable() && ["scheduled", "queued", "running"].includes(j.state)
        ? h("button", { type: "button", "aria-label": `Cancel job ${j.id}`, onclick: async () => {
          if (!(await confirmed("Cancel job?", `Cancel ${j.id}? A running long job is stopped.`, "Cancel job", true))) return;
          if (await act(`Cancelled ${j.id}`, () => api("POST", `/jobs/${j.id}/cancel`))) draw().catch(report);
        } }, "Cancel") : null))), "No job in this state."));
  }
  await draw();
  poll(page, 5, draw);
}

// What a dead letter is of, in words: a node's names its run and generation (a node
// "retry failed" ran again dies again as a new generation).
function letterName(o) {
  return o.run_id ? `node ${o.node_id} of run ${o.run_id} (generation ${o.version})` : o.schedule_id;
}

function letterSource(o) {
  if (o.run_id) {
    return h("td", {}, "node ", h("a", { href: `#/runs/${o.run_id}/nodes/${encodeURIComponent(o.node_id)}` }, o.node_id),
      h("div", { class: "muted" }, `run ${o.run_id} · generation ${o.version}`));
  }
  if (o.schedule_id.startsWith("job_")) return h("td", {}, "job ", h("span", { class: "mono" }, o.schedule_id));
  return h("td", {}, "schedule ", h("a", { href: `#/schedules/${o.schedule_id}` }, o.schedule_id));
}

async function deadLettersPage(page) {
  const filters = { job_class: "", q: "" };
  const selected = new Set();
  let letters = [];
  const list = h("div", {});
  const redriveSelected = h("button", { type: "button", class: "primary", disabled: true, onclick: async () => {
    const ids = [...selected];
    if (!(await confirmed("Redrive selected?", `Queue ${ids.length} dead occurrences again? Their attempts start over.`, `Redrive ${ids.length}`))) return;
    let done = 0;
    for (const one of ids) {
      try { await api("POST", `/dead-letters/${one}/redrive`); done += 1; } catch (error) { say(`Failed: ${error.message}`); }
    }
    say(`Redrove ${done} of ${ids.length}`);
    selected.clear();
    await load().catch(report);
  } }, "Redrive selected");
  const draw = () => {
    const q = filters.q.toLowerCase();
    const shown = letters.filter((o) => (!filters.job_class || o.job_class === filters.job_class) &&
      (!q || `${o.schedule_id} ${o.node_id || ""} ${o.exit_reason || ""}`.toLowerCase().includes(q)));
    for (const one of [...selected]) if (!shown.some((o) => o.id === one)) selected.delete(one);
    redriveSelected.disabled = !selected.size;
    redriveSelected.textContent = `Redrive selected (${selected.size})`;
    replace(list, h("p", { class: "muted" }, `${shown.length} dead letters`),
      table(["Select", "Of", "Fire time", "Class", "Attempts#", "Exit reason", ""], shown.map((o) => h("tr", { "data-id": o.id },
        h("td", {}, writable() ? h("input", { type: "checkbox", "aria-label": `Select ${letterName(o)} at ${when(o.fire_time)}`, checked: selected.has(o.id),
          onchange: (e) => { if (e.target.checked) selected.add(o.id); else selected.delete(o.id); draw(); } }) : null),
        letterSource(o),
        timeCell(o.fire_time), h("td", {}, o.job_class), h("td", { class: "num" }, o.attempts), h("td", {}, o.exit_reason || "—"),
        h("td", {}, writable() ? h("button", { type: "button", "aria-label": `Redrive ${letterName(o)} at ${when(o.fire_time)}`, onclick: async () => {
          if (!(await confirmed("Redrive?", `Queue ${letterName(o)} at ${when(o.fire_time)} again? Its attempts start over.`, "Redrive"))) return;
          if (await act(`Redrove ${letterName(o)}`, () => api("POST", `/dead-letters/${o.id}/redrive`))) await load().catch(report);
        } }, "Redrive") : null))), "No dead letter: nothing waits for a human."));
  };
  async function load() {
    letters = await every("/dead-letters", 500);
    if (page.live()) draw();
  }
  const on = (name) => (event) => { filters[name] = event.target.value; draw(); };
  page.main.append(h("h1", {}, "Dead letters"),
    h("p", { class: "sub" }, "Occurrences whose attempts ran out. A redrive queues one again with its attempts from zero."),
    h("form", { class: "filters", role: "search", onsubmit: (e) => e.preventDefault() },
      h("div", { class: "field" }, h("label", { for: "d-q" }, "Search"), h("input", { id: "d-q", type: "search", placeholder: "schedule, job or reason", oninput: on("q") })),
      select("Class", "d-class", CLASSES, "", on("job_class")),
      writable() ? redriveSelected : null),
    list);
  await load();
}

// --- workflows and runs ----------------------------------------------------------------

async function workflowsPage(page) {
  const flows = await every("/workflows");
  if (!page.live()) return;
  page.main.append(h("h1", {}, "Workflows"),
    table(["Workflow", "Version#", "Nodes#", "Edges#", "Registered"], flows.map((w) => h("tr", {},
      h("td", {}, h("a", { href: `#/workflows/${w.workflow_id}` }, w.workflow_id)), h("td", { class: "num" }, w.version),
      h("td", { class: "num" }, w.nodes), h("td", { class: "num" }, w.edges), timeCell(w.created_at))), "No workflow registered."));
}

async function workflowPage(page, id) {
  let state = "";
  const list = h("div", {});
  const flow = await api("GET", `/workflows/${id}`);
  page.main.append(h("p", {}, h("a", { href: "#/workflows" }, "← Workflows")),
    h("h1", {}, `Workflow ${flow.workflow_id}`),
    h("p", { class: "sub" }, `version ${flow.version}: ${flow.nodes} nodes, ${flow.edges} edges`),
    h("div", { class: "toolbar" },
      writable() ? h("button", { type: "button", class: "primary", onclick: async () => {
        if (!(await confirmed("Start a run?", `Start a run of ${id} (version ${flow.version}).`, "Start run"))) return;
        const run = await act(`Started a run of ${id}`, () => api("POST", `/workflows/${id}/runs`));
        if (run) location.hash = `#/runs/${run.run_id}`;
      } }, "Start a run") : null),
    h("h2", {}, "Runs"),
    h("form", { class: "filters", onsubmit: (e) => e.preventDefault() },
      select("State", "r-state", RUN_STATES, "", (e) => { state = e.target.value; draw().catch(report); })),
    list);
  async function draw() {
    const runs = (await api("GET", `/workflows/${id}/runs?limit=50${state ? `&state=${state}` : ""}`)).items;
    if (!page.live()) return;
    replace(list, table(["Run", "State", "Version#", "Nodes#", "Generation#", "Started", "Finished"], runs.map((r) => h("tr", {},
      h("td", {}, h("a", { href: `#/runs/${r.run_id}` }, r.run_id)), h("td", {}, badge(r.state)), h("td", { class: "num" }, r.version),
      h("td", { class: "num" }, r.total), h("td", { class: "num" }, r.generation), timeCell(r.created_at), timeCell(r.finished_at))), "No run in this state."));
  }
  await draw();
  poll(page, 5, draw);
}

async function runPage(page, id, nodeId) {
  const head = h("div", {});
  const picked = h("div", {});
  const picture = h("div", {});
  const failures = h("div", {});
  page.main.append(head,
    nodeId ? h("section", { "aria-labelledby": "h-node", class: "card" }, h("h2", { id: "h-node" }, `Node ${nodeId}`), picked) : null,
    h("section", { "aria-labelledby": "h-graph" }, h("h2", { id: "h-graph" }, "Graph"), picture),
    h("section", { "aria-labelledby": "h-failed" }, h("h2", { id: "h-failed" }, "Failed nodes"), failures));
  const run = async (verb, label, text, past) => {
    if (!(await confirmed(`${label}?`, text, label, verb === "cancel"))) return;
    if (await act(`${past} ${id}`, () => api("POST", `/runs/${id}/${verb}`))) await refresh().catch(report);
  };
  async function refresh() {
    const [view, graph, failed] = await Promise.all([
      api("GET", `/runs/${id}`),
      api("GET", `/runs/${id}/graph?limit=${GRAPH_LIMIT}`),
      api("GET", `/runs/${id}/nodes?state=failed&limit=50`),
    ]);
    if (!page.live()) return;
    const finished = view.state !== "running";
    replace(head,
      h("p", {}, h("a", { href: `#/workflows/${view.workflow_id}` }, `← Workflow ${view.workflow_id}`)),
      h("h1", {}, `Run ${view.run_id} `, badge(view.state)),
      h("p", {},
        h("label", { for: "run-progress" }, "Progress "),
        h("progress", { id: "run-progress", max: 1, value: view.progress }, `${Math.round(view.progress * 100)}%`),
        ` ${Math.round(view.progress * 100)}% of ${view.total} nodes · generation ${view.generation} · started ${when(view.created_at)}`,
        view.finished_at ? ` · finished ${when(view.finished_at)}` : ""),
      bars(view.counts, "nodes by state"),
      writable() ? h("div", { class: "toolbar", role: "group", "aria-label": "Actions" },
        !finished ? h("button", { type: "button", class: "danger", onclick: () => run("cancel", "Cancel run", `Cancel ${id}? Waiting nodes never start.`, "Cancelled") }, "Cancel run") : null,
        view.state === "failed" ? h("button", { type: "button", class: "primary", onclick: () => run("retry", "Retry failed", `Re-run the failed and blocked nodes of ${id}? What succeeded stays.`, "Retrying") }, "Retry failed") : null,
        h("button", { type: "button", onclick: () => run("reconcile", "Reconcile", `Repair ${id} from its node states: dispatch what is ready, finish it if done.`, "Reconciled") }, "Reconcile")) : null);
    replace(picture,
      graph.complete ? null : h("p", { class: "muted" },
        `A large run: ${graph.nodes.length} of ${view.total} nodes drawn, around its failures first. The bars above count every node.`),
      dagPicture(graph, nodeId));
    if (nodeId) await drawNode(view, graph, failed.items);
    replace(failures, table(["Node", "Generation#", "Exit reason"], failed.items.map((n) => h("tr", {},
      h("td", { class: "mono" }, h("a", { href: `#/runs/${id}/nodes/${encodeURIComponent(n.id)}` }, n.id)), h("td", { class: "num" }, n.generation),
      h("td", {}, n.exit_reason || "—"))), "No failed node."));
    if (finished) stopTimer();
  }
  // The node a link named (a dead letter's): its state, and its dead letters, one a generation.
  async function drawNode(view, graph, failedNodes) {
    const drawn = graph.nodes.find((n) => n.id === nodeId);
    const failed = failedNodes.find((n) => n.id === nodeId);
    const letters = (await every("/dead-letters", 500)).filter((o) => o.run_id === id && o.node_id === nodeId);
    if (!page.live()) return;
    const state = failed ? failed.state : drawn ? drawn.state : null;
    replace(picked,
      h("p", {}, state ? badge(state) : h("span", { class: "muted" }, "not drawn in this large run's picture"),
        failed ? ` generation ${failed.generation} · ${failed.exit_reason || "no exit reason"}` : ""),
      h("h3", {}, "Its dead letters"),
      table(["Generation#", "Fire time", "Attempts#", "Exit reason"], letters.map((o) => h("tr", { "data-id": o.id },
        h("td", { class: "num" }, o.version), timeCell(o.fire_time), h("td", { class: "num" }, o.attempts),
        h("td", {}, o.exit_reason || "—"))), "No dead letter of this node."),
      h("p", {}, h("a", { href: "#/dead-letters" }, "Review and redrive them")));
  }
  await refresh();
  poll(page, 3, refresh);
}

function dagPicture(graph, pickedId) {
  const W = 150, H = 36, GX = 70, GY = 14, PAD = 16, ROWS = 12;
  const layers = [];
  for (const n of graph.nodes) (layers[n.depth] ||= []).push(n);
  const dense = layers.filter(Boolean);
  const parents = new Map(graph.nodes.map((n) => [n.id, []]));
  for (const [p, c] of graph.edges) parents.get(c).push(p);
  // One barycentre pass: each node sits near the mean row of its parents, so edges cross less.
  const row = new Map();
  dense.forEach((layer, i) => {
    if (i > 0) {
      const key = (n) => {
        const rows = parents.get(n.id).filter((p) => row.has(p)).map((p) => row.get(p));
        return rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : Infinity;
      };
      layer.sort((a, b) => key(a) - key(b));
    }
    layer.forEach((n, j) => row.set(n.id, j));
  });
  // A wide layer wraps into columns of at most ROWS nodes, so a fan of hundreds stays on
  // screen beside its parent instead of one column taller than the page.
  const columns = dense.map((layer) => {
    const parts = [];
    for (let k = 0; k < layer.length; k += ROWS) parts.push(layer.slice(k, k + ROWS));
    return parts;
  });
  const tallest = Math.max(...columns.flat().map((c) => c.length));
  const where = new Map();
  let x = PAD;
  columns.forEach((parts, i) => {
    if (i > 0) x += GX;
    parts.forEach((column, k) => {
      if (k > 0) x += W + GY * 2;
      const offset = ((tallest - column.length) * (H + GY)) / 2;
      column.forEach((n, j) => where.set(n.id, [x, PAD + offset + j * (H + GY), k > 0]));
    });
    x += W;
  });
  const width = x + PAD;
  const height = PAD * 2 + tallest * H + (tallest - 1) * GY;
  const counts = NODE_STATES.map((st) => [st, graph.nodes.filter((n) => n.state === st).length]).filter(([, n]) => n);
  const picture = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", id: "dag",
    "aria-label": `Graph of ${graph.nodes.length} nodes in ${dense.length} layers: ${counts.map(([st, n]) => `${n} ${st}`).join(", ")}` },
    svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
      svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#8a919c" }))));
  for (const [p, c] of graph.edges) {
    const [x1, y1] = where.get(p), [x2, y2, wrapped] = where.get(c);
    const a = [x1 + W, y1 + H / 2], b = [x2, y2 + H / 2], mid = (a[0] + b[0]) / 2;
    // Edges into a wrapped column cross the columns before it: drawn faint.
    picture.append(svg("path", { class: wrapped ? "edge far" : "edge", d: `M${a[0]},${a[1]} C${mid},${a[1]} ${mid},${b[1]} ${b[0]},${b[1]}`, "marker-end": "url(#arrow)" }));
  }
  for (const n of graph.nodes) {
    const [x, y] = where.get(n.id);
    const label = n.id.length > 18 ? `${n.id.slice(0, 17)}…` : n.id;
    picture.append(svg("g", { class: `node state-${n.state}${n.id === pickedId ? " picked" : ""}`, "data-node": n.id, "data-state": n.state, "aria-current": n.id === pickedId ? "true" : null, transform: `translate(${x},${y})` },
      svg("title", {}, `${n.id}: ${n.state}`),
      svg("rect", { width: W, height: H, rx: 6 }),
      svg("text", { x: 8, y: 15 }, label),
      svg("text", { x: 8, y: 29, class: "muted", style: null }, n.state)));
  }
  return h("div", {},
    h("div", { class: "graph" }, picture),
    h("details", {}, h("summary", {}, "Nodes as a table"),
      table(["Node", "Layer#", "State", "Parents"], graph.nodes.map((n) => h("tr", {},
        h("td", { class: "mono" }, n.id), h("td", { class: "num" }, n.depth), h("td", {}, badge(n.state)),
        h("td", { class: "mono" }, parents.get(n.id).join(", ") || "—"))), "")));
}

// --- start -----------------------------------------------------------------------------

window.addEventListener("hashchange", route);
if (sessionStorage.getItem(KEY)) start();
else signOut(null);
