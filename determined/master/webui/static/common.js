// redetermined web UI: shared helpers (auth, REST calls, formatting, charts). No build step.
"use strict";

const TOKEN_KEY = "det_token";
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
  const r = await fetch(path, { ...opts, headers });
  if (r.status === 401) {
    localStorage.removeItem(TOKEN_KEY);
    if (!retried) return api(path, opts, true);
    goLogin();
    throw new Error("login needed");
  }
  if (!r.ok) {
    const body = await r.json().catch(() => ({}));
    const err = new Error(body.message || `${r.status} ${r.statusText}`);
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
  localStorage.setItem(NO_AUTO_KEY, "1");
  location.href = "/login";
}

async function showWho() {
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

const fmtTime = (t) => (t ? new Date(t).toLocaleString() : "—");
// Numbers with 5 significant digits (exponent form when very large or small).
function fmtNum(v) {
  if (v === null || v === undefined) return "—";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v) && Math.abs(v) < 1e9) return String(v);
  return Math.abs(v) >= 1e5 || (Math.abs(v) < 1e-4 && v !== 0) ? v.toExponential(4) : String(Number(v.toPrecision(5)));
}
const stateBadge = (s) => el("span", { class: "state " + s }, String(s || "").replace("STATE_", ""));
const isTerminal = (s) => TERMINAL.includes(s);

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

// ---- charts (uPlot) ------------------------------------------------------------------------

const PALETTE = ["#2f6feb", "#e8590c", "#2b8a3e", "#c2255c", "#7048e8", "#0b7285", "#a61e4d", "#5c940d", "#d9480f", "#364fc7"];

// Debiased exponential moving average, as TensorBoard's smoothing slider does.
function smooth(points, weight) {
  if (!weight) return points;
  let last = 0;
  let n = 0;
  return points.map(([x, y]) => {
    last = last * weight + (1 - weight) * y;
    n++;
    return [x, last / (1 - Math.pow(weight, n))];
  });
}

// Scatter plots get a margin so points at the ends are not cut in half.
function padRange(u, min, max) {
  const d = max - min || Math.abs(min) || 1;
  return [min - d * 0.08, max + d * 0.08];
}

// Align [[x, y], ...] series on one sorted x axis (null where a series has no point).
function align(seriesPoints) {
  const xs = [...new Set(seriesPoints.flatMap((pts) => pts.map((p) => p[0])))].sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const ys = seriesPoints.map((pts) => {
    const col = new Array(xs.length).fill(null);
    for (const [x, y] of pts) col[index.get(x)] = y;
    return col;
  });
  return [xs, ...ys];
}

/**
 * Draw (or redraw) a chart in `container`.
 * series: [{label, points: [[x, y]], info?: string}]; options: {xLabel, logY, pointsOnly, tip}.
 * The plotted points are written to container.dataset.series (JSON {label: [[x, y]]}) and to
 * window.detCharts[container.id], so people and tests can read exactly what is drawn.
 */
function drawChart(container, series, options = {}) {
  const logY = !!options.logY;
  const shown = series.map((s) => ({ ...s, points: logY ? s.points.filter((p) => p[1] > 0) : s.points }));
  const record = Object.fromEntries(shown.map((s) => [s.label, s.points]));
  container.dataset.series = JSON.stringify(record);
  window.detCharts = window.detCharts || {};
  window.detCharts[container.id] = record;
  if (container._plot) {
    container._plot.destroy();
    container._plot = null;
  }
  container.querySelectorAll(".empty, .tip").forEach((n) => n.remove());
  if (!shown.some((s) => s.points.length)) {
    container.append(el("div", { class: "empty muted" }, options.empty || "No data yet."));
    return;
  }
  const data = align(shown.map((s) => s.points));
  const width = Math.max(320, container.clientWidth || 600);
  const opts = {
    width,
    height: options.height || 280,
    scales: { x: options.pointsOnly ? { time: false, range: padRange } : { time: false }, y: logY ? { distr: 3 } : {} },
    axes: [{ label: options.xLabel || "batches" }, { label: options.yLabel || "", size: 60 }],
    legend: { show: shown.length <= 8 },
    cursor: { focus: { prox: 24 } },
    focus: { alpha: 0.35 },
    series: [
      { label: options.xLabel || "batches" },
      ...shown.map((s, i) => ({
        label: s.label,
        stroke: PALETTE[i % PALETTE.length],
        width: 1.6,
        spanGaps: true,
        points: { show: options.pointsOnly || s.points.length < 30, size: options.pointsOnly ? 8 : 5 },
        paths: options.pointsOnly ? () => null : undefined,
      })),
    ],
    hooks: { setCursor: [(u) => hoverTip(u, container, shown)] },
  };
  container._plot = new uPlot(opts, data, container);
}

// Show the series nearest the cursor with its `info` (hyperparameters) in a tooltip.
function hoverTip(u, container, series) {
  let tip = container.querySelector(".tip");
  if (!tip) {
    tip = el("div", { class: "tip" });
    container.append(tip);
  }
  const idx = u.cursor.idx;
  if (idx === null || idx === undefined || u.cursor.top < 0) {
    tip.style.display = "none";
    return;
  }
  let best = -1;
  let bestDist = Infinity;
  series.forEach((s, i) => {
    const y = u.data[i + 1][idx];
    if (y === null || y === undefined) return;
    const d = Math.abs(u.valToPos(y, "y") - u.cursor.top);
    if (d < bestDist) {
      bestDist = d;
      best = i;
    }
  });
  if (best < 0 || bestDist > 40) {
    tip.style.display = "none";
    return;
  }
  const s = series[best];
  tip.textContent = `${s.label}\n${u.series[0].label} ${u.data[0][idx]}: ${fmtNum(u.data[best + 1][idx])}` + (s.info ? "\n" + s.info : "");
  tip.style.display = "block";
  tip.style.left = u.cursor.left + u.over.offsetLeft + 14 + "px";
  tip.style.top = u.cursor.top + u.over.offsetTop + 14 + "px";
}

// A table whose headers sort it. columns: [{key, label, value(row) -> sortable, render(row) -> node|text}].
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
          c.label
        )
      )
    );
    const body = sorted.map((r) => el("tr", r._attrs || {}, columns.map((c) => el("td", { "data-key": c.key }, c.render ? c.render(r) : fmtNum(c.value(r))))));
    table.replaceChildren(el("thead", {}, head), el("tbody", {}, body));
  };
  draw();
  return table;
}

function pathId() {
  const parts = location.pathname.split("/").filter(Boolean);
  return parseInt(parts[parts.length - 1], 10);
}

// Charts follow the width of their cards.
window.addEventListener("resize", () => {
  for (const c of document.querySelectorAll(".chart")) {
    if (c._plot) c._plot.setSize({ width: Math.max(320, c.clientWidth), height: c._plot.height });
  }
});

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
