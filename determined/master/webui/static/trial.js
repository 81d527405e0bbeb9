// One trial: summary, alerts, training/validation metric charts, checkpoints, logs.
"use strict";

const TRIAL_ID = pathId();
const POLL_MS = 3000;
const MAX_LOG_LINES = 20000;
let trial = null;
const groups = { training: { rows: [], picked: null, sig: "" }, validation: { rows: [], picked: null, sig: "" } };
const logs = { lines: [], ranks: new Set(), controller: null };

function renderSummary() {
  const t = trial;
  document.title = `Trial ${t.id} · redetermined`;
  document.getElementById("title").replaceChildren(`Trial ${t.id} `, stateBadge(t.state), " ", el("a", { href: `/experiments/${t.experimentId}`, style: "font-size:14px" }, `experiment ${t.experimentId}`));
  const kv = [
    ["batches", t.totalBatchesProcessed],
    ["best searcher metric", fmtNum(t.searcherMetricValue)],
    ["restarts", t.restarts],
    ["started", fmtTime(t.startTime)],
    ["ended", fmtTime(t.endTime)],
  ];
  const kill = isTerminal(t.state) ? [] : [el("button", { "data-action": "kill-trial", onclick: killTrial }, "Kill trial")];
  document.getElementById("summary").replaceChildren(
    el("div", { class: "row" }, el("div", {}, el("dl", { class: "kv" }, kv.map(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))])), ...kill), hparamsTable(t.hparams))
  );
}

// The trial's hyperparameters, one row each (nested ones flattened as a.b).
function hparamsTable(hparams) {
  const rows = Object.entries(flatten(hparams)).map(([k, v]) =>
    el("tr", { "data-hparam": k }, el("td", {}, k), el("td", {}, typeof v === "object" && v !== null ? JSON.stringify(v) : fmtNum(v)))
  );
  const body = rows.length ? rows : [el("tr", {}, el("td", { class: "muted" }, "none"))];
  return el("div", { id: "hparams" }, el("h2", { style: "margin-top:0" }, "Hyperparameters"), el("table", { class: "hparams" }, el("tbody", {}, body)));
}

async function killTrial() {
  if (!confirm(`Kill trial ${TRIAL_ID}?`)) return;
  try {
    await postJSON(`/api/v1/trials/${TRIAL_ID}/kill`);
  } catch (e) {
    showError(e);
  }
  refresh();
}

function numericKeys(rows) {
  const keys = new Set();
  for (const r of rows) for (const [k, v] of Object.entries(r.metrics)) if (typeof v === "number") keys.add(k);
  return [...keys].sort();
}

function renderGroup(name) {
  const g = groups[name];
  const keys = numericKeys(g.rows);
  if (g.picked === null && keys.length) g.picked = new Set(keys.filter((k) => k !== "epoch" && k !== "batches").slice(0, 4));
  const picked = g.picked || new Set();
  const picks = document.getElementById(`${name}-picks`);
  picks.replaceChildren(
    ...keys.map((k) =>
      el(
        "label",
        {},
        el("input", {
          type: "checkbox",
          "data-metric": k,
          checked: picked.has(k),
          onchange: (e) => {
            if (e.target.checked) picked.add(k);
            else picked.delete(k);
            drawGroup(name);
          },
        }),
        " " + k
      )
    )
  );
  drawGroup(name);
}

function drawGroup(name) {
  const g = groups[name];
  const weight = parseFloat(document.getElementById(`${name}-smooth`).value) || 0;
  const logY = document.getElementById(`${name}-log`).checked;
  const series = [...(g.picked || [])].map((k) => ({
    label: k,
    points: smooth(
      g.rows.filter((r) => typeof r.metrics[k] === "number").map((r) => [r.stepsCompleted, r.metrics[k]]),
      weight
    ),
  }));
  drawChart(document.getElementById(`${name}-chart`), series, { logY, empty: `No ${name} metrics yet.` });
}

function renderCheckpoints(ckpts) {
  const box = document.getElementById("checkpoints");
  if (!ckpts.length) return box.replaceChildren(el("span", { class: "muted" }, "No checkpoints yet."));
  const size = (c) => Object.values(c.resources || {}).reduce((a, b) => a + Number(b || 0), 0);
  const columns = [
    { key: "uuid", label: "UUID", value: (c) => c.uuid, render: (c) => el("code", {}, c.uuid) },
    { key: "steps", label: "Batches", value: (c) => (c.metadata || {}).steps_completed },
    { key: "state", label: "State", value: (c) => c.state, render: (c) => stateBadge(c.state) },
    { key: "size", label: "Size", value: size, render: (c) => fmtBytes(size(c)) },
    { key: "time", label: "Reported", value: (c) => c.reportTime, render: (c) => fmtTime(c.reportTime) },
    {
      key: "metrics",
      label: "Validation metrics",
      value: (c) => c.training.searcherMetric,
      render: (c) => {
        const m = (c.training.validationMetrics || {}).avgMetrics;
        return m ? Object.entries(m).map(([k, v]) => `${k}=${fmtNum(v)}`).join("  ") : "—";
      },
    },
    {
      key: "download",
      label: "",
      value: () => 0,
      render: downloadButton,
    },
  ];
  ckpts.forEach((c) => (c._attrs = { "data-uuid": c.uuid }));
  box.replaceChildren(sortableTable(columns, ckpts, { key: "steps", desc: true }));
}

// ---- logs ------------------------------------------------------------------------------------

function renderLogs() {
  const rank = document.getElementById("log-rank").value;
  const needle = document.getElementById("log-search").value.toLowerCase();
  const pre = document.getElementById("logs");
  const shown = logs.lines.filter((l) => (rank === "" || String(l.rankId) === rank) && (!needle || l.message.toLowerCase().includes(needle)));
  const nodes = [];
  for (const l of shown) {
    const text = l.message.endsWith("\n") ? l.message : l.message + "\n";
    if (!needle) {
      nodes.push(text);
      continue;
    }
    const i = text.toLowerCase().indexOf(needle);
    nodes.push(text.slice(0, i), el("mark", {}, text.slice(i, i + needle.length)), text.slice(i + needle.length));
  }
  const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 30;
  pre.replaceChildren(...nodes);
  pre.dataset.lines = String(shown.length);
  if (document.getElementById("log-follow").checked && atBottom) pre.scrollTop = pre.scrollHeight;
  document.getElementById("log-count").textContent = `${shown.length} of ${logs.lines.length} lines`;
  const select = document.getElementById("log-rank");
  for (const r of [...logs.ranks].sort()) {
    if (![...select.options].some((o) => o.value === String(r))) select.append(el("option", { value: String(r) }, `rank ${r}`));
  }
}

// Read the NDJSON stream; with follow it stays open until the trial ends (or follow is unticked).
async function streamLogs() {
  if (logs.controller) logs.controller.abort();
  const controller = new AbortController();
  logs.controller = controller;
  logs.lines = [];
  const follow = document.getElementById("log-follow").checked;
  try {
    const r = await api(`/api/v1/trials/${TRIAL_ID}/logs?follow=${follow}`, { signal: controller.signal });
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      const parts = buf.split("\n");
      buf = parts.pop();
      for (const p of parts) {
        if (!p.trim()) continue;
        const line = JSON.parse(p).result;
        logs.lines.push(line);
        if (line.rankId !== null && line.rankId !== undefined) logs.ranks.add(line.rankId);
      }
      if (logs.lines.length > MAX_LOG_LINES) logs.lines = logs.lines.slice(-MAX_LOG_LINES);
      renderLogs();
    }
    renderLogs();
  } catch (e) {
    if (e.name !== "AbortError") showError(e);
  }
}

async function refresh() {
  try {
    const [t, train, val, ckpts] = await Promise.all([
      getJSON(`/api/v1/trials/${TRIAL_ID}`),
      getJSON(`/api/v1/webui/trials/${TRIAL_ID}/metrics?group=training`),
      getJSON(`/api/v1/webui/trials/${TRIAL_ID}/metrics?group=validation`),
      getJSON(`/api/v1/trials/${TRIAL_ID}/checkpoints`),
    ]);
    trial = t.trial;
    renderSummary();
    const alerts = await getJSON(`/api/v1/experiments/${trial.experimentId}/alerts?trialId=${TRIAL_ID}`);
    renderAlerts("alerts-card", alerts.alerts, false);
    for (const [name, rows] of [["training", train.metrics], ["validation", val.metrics]]) {
      const sig = JSON.stringify(rows);
      if (sig === groups[name].sig) continue;
      groups[name].rows = rows;
      groups[name].sig = sig;
      renderGroup(name);
    }
    renderCheckpoints(ckpts.checkpoints);
    showError(null);
  } catch (e) {
    if (e.status === 404) return notFound();
    showError(e);
  }
}

function notFound() {
  trial = null;
  if (logs.controller) logs.controller.abort();
  showNotFound(`Trial ${TRIAL_ID}`);
}

document.addEventListener("DOMContentLoaded", () => {
  showWho();
  for (const name of ["training", "validation"]) {
    document.getElementById(`${name}-log`).addEventListener("change", () => drawGroup(name));
    document.getElementById(`${name}-smooth`).addEventListener("input", () => drawGroup(name));
  }
  document.getElementById("log-rank").addEventListener("change", renderLogs);
  document.getElementById("log-search").addEventListener("input", renderLogs);
  document.getElementById("log-follow").addEventListener("change", streamLogs);
  if (typeof TRIAL_ID !== "number") return notFound();
  refresh().then(() => trial && streamLogs());
  setInterval(() => trial && !isTerminal(trial.state) && refresh(), POLL_MS);
});
