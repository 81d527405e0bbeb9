// The experiment list: polled every 2 s, so states and progress change without a reload.
// One request a poll: a page of the newest experiments, each with its best searcher metric
// (bestTrialSearcherMetric), however many the cluster holds.
"use strict";

const POLL_MS = 2000;
const PAGE = 100; // experiments a page shows, newest first
let offset = 0;

async function act(expId, action) {
  if (action === "kill" && !confirm(`Kill experiment ${expId}? Its running trials are stopped at once.`)) return;
  try {
    await postJSON(`/api/v1/experiments/${expId}/${action}`);
    showError(null);
  } catch (e) {
    showError(`${action} experiment ${expId}: ${e.message}`);
  }
  refresh();
}

function actions(exp) {
  const b = (action, label, cls) =>
    el("button", { "data-action": action, "data-exp": exp.id, class: cls, onclick: () => act(exp.id, action) }, label);
  const out = [];
  if (isRunnable(exp.state)) out.push(b("pause", "Pause"));
  if (exp.state === "STATE_PAUSED") out.push(b("activate", "Activate"));
  if (!isTerminal(exp.state) && !exp.state.startsWith("STATE_STOPPING")) out.push(b("kill", "Kill", "danger"));
  if (isTerminal(exp.state)) out.push(exp.archived ? b("unarchive", "Unarchive") : b("archive", "Archive"));
  return el("span", { class: "actions" }, out.flatMap((x) => [x, " "]));
}

function progressBar(exp) {
  const p = isTerminal(exp.state) && exp.state === "STATE_COMPLETED" ? 1 : exp.progress || 0;
  const pct = Math.round(Math.min(Math.max(p, 0), 1) * 100);
  return el("span", { title: pct + "%" }, el("span", { class: "progress", "data-progress": pct }, el("div", { style: `width:${pct}%` })), ` ${pct}%`);
}

// The project filter: "workspace / project" options, the choice kept in the address
// (?projectId=N) so a reload or a shared link shows the same list.
async function loadProjects() {
  const select = document.getElementById("project");
  const wanted = new URLSearchParams(location.search).get("projectId") || "0";
  try {
    const projects = (await getJSON("/api/v1/workspaces/0/projects")).projects;
    select.replaceChildren(
      el("option", { value: "0" }, "All projects"),
      ...projects.map((p) => el("option", { value: String(p.id), "data-project": p.name }, `${p.workspaceName} / ${p.name}${p.archived ? " (archived)" : ""}`))
    );
  } catch (e) {
    showError(e);
  }
  select.value = [...select.options].some((o) => o.value === wanted) ? wanted : "0";
}

// "1–100 of 1,234" and the buttons to the newer and older pages.
function showPager(p) {
  const box = document.getElementById("pager");
  const go = (to) => () => {
    offset = to;
    refresh();
  };
  const shown = p.total ? `${p.startIndex + 1}–${p.endIndex} of ${p.total}` : "";
  box.replaceChildren(
    el("button", { "data-page": "newer", disabled: offset <= 0, onclick: go(Math.max(0, offset - PAGE)) }, "Newer"),
    " ",
    el("span", { class: "muted", id: "shown" }, shown),
    " ",
    el("button", { "data-page": "older", disabled: p.endIndex >= p.total, onclick: go(offset + PAGE) }, "Older")
  );
}

function onProjectChange() {
  const id = document.getElementById("project").value;
  const url = new URL(location.href);
  if (id === "0") url.searchParams.delete("projectId");
  else url.searchParams.set("projectId", id);
  history.replaceState(null, "", url);
  offset = 0;
  refresh();
}

async function refresh() {
  const archived = document.getElementById("show-archived").checked;
  const project = document.getElementById("project").value;
  const query = new URLSearchParams({ limit: PAGE, offset, orderBy: "ORDER_BY_DESC" });
  if (!archived) query.set("archived", "false");
  if (project !== "0") query.set("projectId", project);
  let exps, pagination;
  try {
    ({ experiments: exps, pagination } = await getJSON("/api/v1/experiments?" + query));
  } catch (e) {
    showError(e);
    return;
  }
  if (!exps.length && offset > 0 && pagination.total > 0) {
    offset = Math.max(0, Math.floor((pagination.total - 1) / PAGE) * PAGE); // the list shrank
    return refresh();
  }
  exps.forEach((e) => (e.bestMetric = e.bestTrialSearcherMetric));
  showPager(pagination);
  const columns = [
    { key: "id", label: "ID", value: (e) => e.id, render: (e) => el("a", { href: `/experiments/${e.id}` }, String(e.id)) },
    { key: "name", label: "Name", value: (e) => e.name, render: (e) => el("a", { href: `/experiments/${e.id}` }, e.name || "(unnamed)") },
    { key: "state", label: "State", value: (e) => e.state, render: (e) => stateBadge(e.state) },
    { key: "progress", label: "Progress", value: (e) => e.progress, render: progressBar },
    { key: "searcher", label: "Searcher", value: (e) => e.searcherType },
    { key: "trials", label: "Trials", value: (e) => e.numTrials },
    { key: "best", label: "Best metric", value: (e) => e.bestMetric },
    { key: "start", label: "Started", value: (e) => e.startTime, render: (e) => fmtWhen(e.startTime) },
    { key: "end", label: "Ended", value: (e) => e.endTime, render: (e) => fmtWhen(e.endTime) },
    { key: "project", label: "Project", value: (e) => `${e.workspaceName} / ${e.projectName}` },
    { key: "user", label: "User", value: (e) => e.username },
    { key: "actions", label: "Actions", value: () => 0, render: actions },
  ];
  exps.forEach((e) => (e._attrs = { "data-exp-id": e.id, "data-state": e.state }));
  const box = document.getElementById("experiments");
  const prev = box.querySelector("th.sorted-asc, th.sorted-desc");
  const sort = prev ? { key: prev.dataset.key, desc: prev.classList.contains("sorted-desc") } : { key: "id", desc: true };
  box.replaceChildren(exps.length ? sortableTable(columns, exps, sort) : el("span", { class: "muted" }, "No experiments yet: det experiment create CONFIG MODEL_DIR"));
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
}

document.addEventListener("DOMContentLoaded", async () => {
  document.getElementById("show-archived").addEventListener("change", () => {
    offset = 0;
    refresh();
  });
  document.getElementById("project").addEventListener("change", onProjectChange);
  showWho();
  await loadProjects();
  refresh();
  setInterval(refresh, POLL_MS);
});
