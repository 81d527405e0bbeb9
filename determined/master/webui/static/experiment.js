// One experiment: summary, alerts, learning curves, hyperparameter chart, trials, ASHA rungs, config.
"use strict";

const EXP_ID = pathId();
const POLL_MS = 3000;
let state = { exp: null, trials: [], curves: null, best: null, original: null, signatures: [] };

const hpText = (hp) =>
  Object.entries(flatten(hp))
    .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`)
    .join("\n");

function renderSummary() {
  const e = state.exp;
  document.title = `Experiment ${e.id} · redetermined`;
  document.getElementById("title").replaceChildren(`Experiment ${e.id}: ${e.name || "(unnamed)"} `, stateBadge(e.state));
  const pct = Math.round((e.state === "STATE_COMPLETED" ? 1 : e.progress || 0) * 100);
  const s = e.config.searcher || {};
  const kv = [
    ["searcher", `${s.name} (metric ${s.metric}, ${s.smaller_is_better === false ? "larger" : "smaller"} is better)`],
    ["best trial", bestTrial()],
    ["best checkpoint", bestCheckpoint()],
    ["progress", `${pct}%`],
    ["trials", e.numTrials],
    ["user", e.username],
    ["started", fmtTime(e.startTime)],
    ["ended", fmtTime(e.endTime)],
    ["description", e.description || "—"],
  ];
  const buttons = [];
  const b = (action, label) => el("button", { "data-action": action, onclick: () => act(action) }, label);
  if (isRunnable(e.state)) buttons.push(b("pause", "Pause"));
  if (e.state === "STATE_PAUSED") buttons.push(b("activate", "Activate"));
  if (!isTerminal(e.state) && !e.state.startsWith("STATE_STOPPING")) buttons.push(b("kill", "Kill"));
  if (isTerminal(e.state)) buttons.push(e.archived ? b("unarchive", "Unarchive") : b("archive", "Archive"));
  document.getElementById("summary").replaceChildren(
    el("dl", { class: "kv" }, kv.map(([k, v]) => [el("dt", {}, k), el("dd", { "data-key": k }, v instanceof Node ? v : String(v))])),
    el("div", { class: "controls", style: "margin-top:8px" }, buttons)
  );
}

// Trials best first by the searcher metric (those without one last).
function ranked() {
  const smaller = (state.exp.config.searcher || {}).smaller_is_better !== false;
  const scored = state.trials.filter((t) => typeof t.searcherMetricValue === "number");
  scored.sort((a, b) => (smaller ? a.searcherMetricValue - b.searcherMetricValue : b.searcherMetricValue - a.searcherMetricValue));
  return [...scored, ...state.trials.filter((t) => typeof t.searcherMetricValue !== "number")];
}

function bestTrial() {
  const t = ranked()[0];
  if (!t || typeof t.searcherMetricValue !== "number") return "none validated yet";
  return el("span", {}, el("a", { href: `/trials/${t.id}`, "data-best-trial": t.id }, `trial ${t.id}`), ` (${metricName()} ${fmtNum(t.searcherMetricValue)})`);
}

// The checkpoint the SDK's top_checkpoint() returns: completed, best searcher metric.
function bestCheckpoint() {
  const c = state.best;
  if (!c) return "none with a validation yet";
  const steps = (c.metadata || {}).steps_completed;
  return el(
    "span",
    { "data-best-checkpoint": c.uuid },
    el("code", {}, c.uuid),
    ` (trial `,
    el("a", { href: `/trials/${c.training.trialId}` }, String(c.training.trialId)),
    `, batch ${steps}, ${metricName()} ${fmtNum(c.training.searcherMetric)}) `,
    downloadButton(c)
  );
}

let actionError = null; // the last refused action's message: polling keeps it shown

async function act(action) {
  if (action === "kill" && !confirm(`Kill experiment ${EXP_ID}? Its running trials are stopped at once.`)) return;
  actionError = null;
  try {
    await postJSON(`/api/v1/experiments/${EXP_ID}/${action}`);
  } catch (e) {
    actionError = `${action} experiment ${EXP_ID}: ${e.message}`;
  }
  refresh(true);
}

function metricName() {
  return (state.exp.config.searcher || {}).metric;
}

function renderTrials() {
  const smaller = (state.exp.config.searcher || {}).smaller_is_better !== false;
  const hpKeys = [...new Set(state.trials.flatMap((t) => Object.keys(flatten(t.hparams))))];
  const metric = metricName();
  const columns = [
    { key: "id", label: "Trial", value: (t) => t.id, render: (t) => el("a", { href: `/trials/${t.id}` }, String(t.id)) },
    { key: "state", label: "State", value: (t) => t.state, render: (t) => stateBadge(t.state) },
    { key: "batches", label: "Batches", value: (t) => t.totalBatchesProcessed },
    { key: "best", label: `best ${metric}`, value: (t) => t.searcherMetricValue },
    { key: "latest", label: `latest ${metric}`, value: (t) => ((t.latestValidation || {}).metrics || {}).avgMetrics?.[metric] },
    { key: "restarts", label: "Restarts", value: (t) => t.restarts },
    { key: "ckpts", label: "Checkpoints", value: (t) => t.checkpointCount },
    ...hpKeys.map((k) => ({ key: "hp:" + k, label: k, value: (t) => flatten(t.hparams)[k], render: (t) => fmtNum(flatten(t.hparams)[k]) })),
  ];
  state.trials.forEach((t) => (t._attrs = { "data-trial-id": t.id }));
  const box = document.getElementById("trials");
  const prev = box.querySelector("th.sorted-asc, th.sorted-desc");
  const sort = prev ? { key: prev.dataset.key, desc: prev.classList.contains("sorted-desc") } : { key: "best", desc: !smaller };
  box.replaceChildren(sortableTable(columns, state.trials, sort));
}

function renderCurves() {
  const c = state.curves;
  const byId = new Map(state.trials.map((t) => [t.id, t]));
  const series = c.trials.map((t) => ({ label: `trial ${t.trialId}`, points: t.points, info: hpText((byId.get(t.trialId) || t).hparams) }));
  document.getElementById("curve-note").textContent = `${c.metric} at each validation against batches, one line per trial (hover a line or a legend entry to highlight it, click an entry to hide it)`;
  const best = ranked().map((t) => `trial ${t.id}`);
  drawChart(document.getElementById("learning-curve"), series, { yLabel: c.metric, empty: "No validation yet.", best });
}

function renderHpChart() {
  const pick = document.getElementById("hp-pick");
  const keys = [...new Set(state.trials.flatMap((t) => Object.keys(flatten(t.hparams))))];
  const current = pick.value;
  pick.replaceChildren(...keys.map((k) => el("option", { value: k, selected: k === current }, k)));
  const key = pick.value;
  const chart = document.getElementById("hp-chart");
  if (!key) return drawChart(chart, [], { empty: "No hyperparameters." });
  const values = state.trials.map((t) => flatten(t.hparams)[key]);
  const numeric = values.every((v) => typeof v === "number");
  const cats = numeric ? [] : [...new Set(values.map((v) => JSON.stringify(v)))];
  const points = state.trials
    .filter((t) => typeof t.searcherMetricValue === "number")
    .map((t) => {
      const v = flatten(t.hparams)[key];
      return [numeric ? v : cats.indexOf(JSON.stringify(v)), t.searcherMetricValue];
    });
  const label = numeric ? key : `${key} (${cats.map((c, i) => `${i}=${c}`).join(", ")})`;
  drawChart(chart, [{ label: `best ${metricName()}`, points }], { xLabel: label, yLabel: metricName(), pointsOnly: true, empty: "No validated trials yet." });
}

function renderRungs(r) {
  const card = document.getElementById("rungs-card");
  card.hidden = !r.brackets.length;
  if (!r.brackets.length) return;
  const parts = r.brackets.map((b, bi) =>
    el(
      "div",
      { "data-bracket": bi },
      r.brackets.length > 1 ? el("h3", {}, `Bracket ${bi + 1}`) : null,
      el(
        "table",
        {},
        el("tr", {}, el("th", {}, "rung"), el("th", {}, "trains to"), el("th", {}, "still training"), el("th", {}, "trials (metric; ▲ promoted)")),
        b.rungs.map((rung, i) =>
          el(
            "tr",
            { "data-rung": i },
            el("td", {}, String(i)),
            el("td", {}, String(rung.length)),
            el("td", {}, String(rung.outstanding)),
            el(
              "td",
              {},
              rung.trials.map((t) => [el("a", { href: `/trials/${t.trialId}`, class: t.promoted ? "promoted" : "" }, `${t.trialId}: ${fmtNum(t.metric)}${t.promoted ? " ▲" : ""}`), "  "])
            )
          )
        )
      )
    )
  );
  document.getElementById("rungs").replaceChildren(...parts);
}

function renderConfig() {
  const which = document.querySelector("input[name=cfg]:checked").value;
  const text = which === "original" ? state.original || "" : toYaml(state.exp.config).trimStart();
  document.getElementById("config").textContent = text;
}

async function refresh(force = false) {
  const top = "checkpoints?sortByAttr=SORT_BY_SEARCHER_METRIC&states=STATE_COMPLETED&limit=1";
  try {
    const [exp, trials, curves, rungs, best, alerts] = await Promise.all([
      getJSON(`/api/v1/experiments/${EXP_ID}`),
      getJSON(`/api/v1/experiments/${EXP_ID}/trials`),
      getJSON(`/api/v1/webui/experiments/${EXP_ID}/metrics?group=validation`),
      getJSON(`/api/v1/webui/experiments/${EXP_ID}/rungs`),
      getJSON(`/api/v1/experiments/${EXP_ID}/${top}`),
      getJSON(`/api/v1/experiments/${EXP_ID}/alerts`),
    ]);
    if (state.original === null) {
      state.original = (await getJSON(`/api/v1/webui/experiments/${EXP_ID}/original_config`)).originalConfig;
    }
    const ckpt = best.checkpoints.find((c) => typeof c.training.searcherMetric === "number") || null;
    state = { ...state, exp: exp.experiment, trials: trials.trials, curves, best: ckpt };
    showError(actionError);
    // Redraw only the parts whose data changed (a running experiment's duration changes on
    // every poll; redrawing its charts would reset their legend scroll and highlight).
    const parts = [
      [renderSummary, [exp.experiment, ckpt, trials.trials]],
      [renderTrials, trials.trials],
      [renderCurves, [curves, trials.trials]],
      [renderHpChart, trials.trials],
      [() => renderRungs(rungs), rungs],
      [renderConfig, exp.experiment.config],
      [() => renderAlerts("alerts-card", alerts.alerts, true), alerts.alerts],
    ];
    const sigs = parts.map(([, data]) => JSON.stringify(data)); // before rendering adds _attrs
    parts.forEach(([render], i) => {
      const sig = sigs[i];
      if (!force && sig === state.signatures[i]) return;
      state.signatures[i] = sig;
      render();
    });
  } catch (e) {
    if (e.status === 404) return notFound();
    showError(e);
  }
}

function notFound() {
  state.exp = null; // stops the polling
  showNotFound(`Experiment ${EXP_ID}`);
}

document.addEventListener("DOMContentLoaded", () => {
  showWho();
  if (typeof EXP_ID !== "number") return notFound();
  document.getElementById("hp-pick").addEventListener("change", renderHpChart);
  document.querySelectorAll("input[name=cfg]").forEach((r) => r.addEventListener("change", renderConfig));
  refresh(true);
  setInterval(() => state.exp && !isTerminal(state.exp.state) && refresh(), POLL_MS);
});
