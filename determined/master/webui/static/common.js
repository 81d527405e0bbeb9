// redetermined web UI: shared helpers (auth, REST calls, formatting, charts). No build step.
"use strict";

const TOKEN_KEY = "det_token";
const CSRF_KEY = "det_csrf"; // the login's csrfToken: sent as X-CSRF-Token with every change
const NO_AUTO_KEY = "det_no_auto_login"; // set by "log out": do not log in as "determined" again
const TERMINAL = ["STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR", "STATE_DELETED"];

// ---- auth and REST -------------------------------------------------------------------------

async function login(username, password) {
  const r = await fetch("/api/v1/auth/login", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ username, password }),
  });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.message || `${r.status} ${r.statusText}`);
  localStorage.setItem(TOKEN_KEY, body.token);
  localStorage.setItem(CSRF_KEY, body.csrfToken || "");
  localStorage.removeItem(NO_AUTO_KEY);
  return body;
}

function goLogin() {
  const next = location.pathname + location.search;
  location.href = "/login?next=" + encodeURIComponent(next);
}

// The default user "determined" has an empty password (as in the reference): log in as it
// unless the user logged out; a master with passwords set sends people to /login.
async function ensureToken() {
  if (localStorage.getItem(TOKEN_KEY)) return;
  if (!localStorage.getItem(NO_AUTO_KEY)) {
    try {
      await login("determined", "");
      return;
    } catch (e) {
      /* fall through to the login page */
    }
  }
  goLogin();
  throw new Error("login needed");
}

async function api(path, opts = {}, retried = false) {
  await ensureToken();
  const headers = { ...(opts.headers || {}), Authorization: "Bearer " + localStorage.getItem(TOKEN_KEY) };
  // The master asks for it only when a cookie authenticates a change; sending it always is
  // harmless and keeps the UI working behind a proxy that turns the token into a cookie.
  if ((opts.method || "GET") !== "GET") headers["X-CSRF-Token"] = localStorage.getItem(CSRF_KEY) || "";
  const r = await fetch(path, { ...opts, headers });
  if (r.status === 401) {
    localStorage.removeItem(TOKEN_KEY);
    if (!retried) return api(path, opts, true);
    goLogin();
    throw new Error("login needed");
  }
  if (!r.ok) {
    const body = await r.json().catch(() => ({}));
    const why = body.message || `${r.status} ${r.statusText}`;
    const err = new Error(r.status === 403 ? `Permission denied: ${why}` : why);
    err.status = r.status;
    throw err;
  }
  return r;
}

const getJSON = async (path) => (await api(path)).json();
const postJSON = async (path, body = {}) =>
  (await api(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) })).json();

async function logout() {
  try {
    await api("/api/v1/auth/logout", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
  } catch (e) {
    /* already gone */
  }
  localStorage.removeItem(TOKEN_KEY);
  localStorage.removeItem(CSRF_KEY);
  localStorage.setItem(NO_AUTO_KEY, "1");
  document.cookie = "auth=; path=/proxy/; max-age=0"; // the Tasks page's proxy login

  location.href = "/login";
}

// The admin's cluster-wide message (GET /api/v1/master's clusterMessage) as a banner under the
// header of every page.
async function showClusterMessage() {
  const header = document.querySelector("header.top");
  if (!header) return;
  let message = null;
  try {
    message = (await (await fetch("/api/v1/master")).json()).clusterMessage || null;
  } catch (e) {
    return;
  }
  const old = document.getElementById("cluster-message");
  if (old) old.remove();
  if (!message) return;
  const until = message.endTime ? [" (until ", fmtWhen(message.endTime), ")"] : [];
  header.after(el("div", { id: "cluster-message", class: "banner", role: "status" }, message.message, until));
}

async function showWho() {
  showClusterMessage();
  const who = document.getElementById("who");
  if (!who) return;
  try {
    const me = await getJSON("/api/v1/me");
    who.textContent = me.user.username;
  } catch (e) {
    who.textContent = "";
  }
}

// ---- DOM and formatting --------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// Nested hyperparameters as one level, keys joined with ".".
function flatten(obj, prefix = "", out = {}) {
  for (const [k, v] of Object.entries(obj || {})) {
    if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, prefix + k + ".", out);
    else out[prefix + k] = v;
  }
  return out;
}

const fmtTime = (t) => (t ? new Date(t).toLocaleString() : "—");
// A short time for table cells ("Nov 24, 17:22"), the full one on hover.
function fmtWhen(t) {
  if (!t) return "—";
  const d = new Date(t);
  const short = d.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", hour12: false });
  return el("span", { title: d.toLocaleString() }, short);
}
// Numbers with 5 significant digits (exponent form when very large or small).
function fmtNum(v) {
  if (v === null || v === undefined) return "—";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v) && Math.abs(v) < 1e9) return String(v);
  return Math.abs(v) >= 1e5 || (Math.abs(v) < 1e-4 && v !== 0) ? v.toExponential(4) : String(Number(v.toPrecision(5)));
}
const stateBadge = (s) => el("span", { class: "state " + s }, String(s || "").replace("STATE_", ""));
const isTerminal = (s) => TERMINAL.includes(s);
// ACTIVE and the sub-states the API derives from the allocations (QUEUED ... RUNNING).
const RUNNABLE = ["STATE_ACTIVE", "STATE_QUEUED", "STATE_PULLING", "STATE_STARTING", "STATE_RUNNING"];
const isRunnable = (s) => RUNNABLE.includes(s);

function fmtBytes(n) {
  n = Number(n || 0);
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

// The page of an experiment or trial that does not exist: one message, no empty panels.
function showNotFound(what) {
  document.title = `${what} not found · redetermined`;
  document.getElementById("page").replaceChildren(
    el("h1", {}, `${what} not found`),
    el("div", { class: "card notice", id: "not-found" }, "This master has no such record: it may have been deleted, or the address is wrong. ", el("a", { href: "/" }, "All experiments"))
  );
}

function showError(err) {
  const box = document.getElementById("error");
  if (box) box.textContent = err ? String(err.message || err) : "";
}

// Strings that YAML (1.1 or 1.2) reads back as the same string without quotes.
const YAML_WORDS = /^(true|false|null|yes|no|on|off|y|n|~)$/i;
const plainYaml = (x) => /^[A-Za-z_/][\w./@-]*(:[\w./@-]+)*$/.test(x) && !YAML_WORDS.test(x);

// A small YAML writer for the experiment config (JSON data only: maps, lists, scalars).
function toYaml(v, indent = "") {
  const scalar = (x) => {
    if (x === null || x === undefined) return "null";
    if (typeof x === "string") return plainYaml(x) ? x : JSON.stringify(x);
    return String(x);
  };
  if (Array.isArray(v)) {
    if (!v.length) return " []";
    return v.map((x) => `\n${indent}- ` + (x && typeof x === "object" ? toYaml(x, indent + "  ").trimStart() : scalar(x))).join("");
  }
  if (v && typeof v === "object") {
    const keys = Object.keys(v);
    if (!keys.length) return " {}";
    return keys
      .map((k) => {
        const x = v[k];
        const key = plainYaml(k) ? k : JSON.stringify(k);
        return `\n${indent}${key}:` + (x && typeof x === "object" ? toYaml(x, indent + "  ") : " " + scalar(x));
      })
      .join("");
  }
  return " " + scalar(v);
}

// ---- tables ------------------------------------------------------------------------------

// A table whose headers sort it (in a box that scrolls sideways rather than widen the page).
// columns: [{key, label, value(row) -> sortable, render(row) -> node|text}].
function sortableTable(columns, rows, initial = {}) {
  let sortKey = initial.key;
  let desc = !!initial.desc;
  const table = el("table", { class: "sortable-table" });
  const draw = () => {
    const col = columns.find((c) => c.key === sortKey);
    const sorted = [...rows];
    if (col) {
      sorted.sort((a, b) => {
        const va = col.value(a);
        const vb = col.value(b);
        if (va === vb) return 0;
        if (va === null || va === undefined) return 1; // missing values last either way
        if (vb === null || vb === undefined) return -1;
        return (va < vb ? -1 : 1) * (desc ? -1 : 1);
      });
    }
    const head = el(
      "tr",
      {},
      columns.map((c) =>
        el(
          "th",
          {
            class: "sortable" + (c.key === sortKey ? (desc ? " sorted-desc" : " sorted-asc") : ""),
            "data-key": c.key,
            onclick: () => {
              desc = c.key === sortKey ? !desc : false;
              sortKey = c.key;
              draw();
            },
          },
          breakable(c.label)
        )
      )
    );
    const body = sorted.map((r) => el("tr", r._attrs || {}, columns.map((c) => el("td", { "data-key": c.key }, c.render ? c.render(r) : fmtNum(c.value(r))))));
    table.replaceChildren(el("thead", {}, head), el("tbody", {}, body));
  };
  draw();
  return el("div", { class: "table-wrap" }, table);
}

// Text that may wrap after "_" and "." (long metric and hyperparameter names in headers).
const breakable = (text) => String(text).split(/(?<=[_.])/).flatMap((part, i) => (i ? [el("wbr"), part] : [part]));

// Save a checkpoint's files as <uuid>.tar.gz.
async function download(uuid) {
  try {
    const blob = await (await api(`/api/v1/webui/checkpoints/${uuid}/download`)).blob();
    const a = el("a", { href: URL.createObjectURL(blob), download: `${uuid}.tar.gz` });
    document.body.append(a);
    a.click();
    a.remove();
  } catch (e) {
    showError(`download ${uuid}: ${e.message}`);
  }
}

const downloadButton = (c) => (c.state === "STATE_COMPLETED" ? el("button", { "data-download": c.uuid, onclick: () => download(c.uuid) }, "Download") : "");

// The page's id from its address (/experiments/ID, /trials/ID): a number, or the text found
// there when it is not one (the page then says it does not exist).
function pathId() {
  const parts = location.pathname.split("/").filter(Boolean);
  const last = decodeURIComponent(parts[parts.length - 1] || "");
  return /^[0-9]+$/.test(last) ? parseInt(last, 10) : last;
}

document.addEventListener("DOMContentLoaded", () => {
  const out = document.getElementById("logout");
  if (out) out.addEventListener("click", (e) => (e.preventDefault(), logout()));
});

// Alerts raised with core.Context.alert(): a table in the card `cardId` (hidden while empty).
function renderAlerts(cardId, alerts, withTrial) {
  const card = document.getElementById(cardId);
  card.hidden = !alerts.length;
  const level = (l) => String(l || "").replace("LOG_LEVEL_", "");
  const rows = alerts.map((a) =>
    el(
      "tr",
      { "data-alert-id": a.id, class: "alert " + level(a.level) },
      el("td", {}, fmtTime(a.createdAt)),
      el("td", {}, level(a.level)),
      withTrial ? el("td", {}, a.trialId ? el("a", { href: `/trials/${a.trialId}` }, String(a.trialId)) : "—") : null,
      el("td", {}, a.title),
      el("td", { class: "wrap" }, a.description)
    )
  );
  const head = ["time", "level", ...(withTrial ? ["trial"] : []), "title", "description"];
  card.querySelector(".alerts").replaceChildren(el("table", {}, el("tr", {}, head.map((h) => el("th", {}, h))), rows));
}
