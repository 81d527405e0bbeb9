// The cluster page: agents and their slots (enable, disable, drain; admins only) and the job
// queue in the order the scheduler starts jobs. Polled every 2 s.
"use strict";

const POLL_MS = 2000;

// "drain" is a disable that lets running work finish.
async function toggle(path, what, body) {
  if (what === "disable" && !confirm(`Disable ${path}? Work running there is killed and runs again elsewhere.`)) return;
  try {
    await postJSON(`/api/v1/agents/${path}/${what === "enable" ? "enable" : "disable"}`, body);
    showError(null);
  } catch (e) {
    showError(`${what} ${path}: ${e.message}`);
  }
  refresh();
}

function stateOf(x) {
  return x.enabled ? "enabled" : x.draining ? "draining" : "disabled";
}

function buttons(path, x) {
  const b = (what, label, body, cls) =>
    el("button", { "data-action": what, "data-target": path, class: cls, onclick: () => toggle(path, what, body) }, label);
  if (!x.enabled) return el("span", { class: "actions" }, b("enable", "Enable", {}));
  return el("span", { class: "actions" }, b("drain", "Drain", { drain: true }), " ", b("disable", "Disable", { drain: false }, "danger"));
}

async function refresh() {
  let agents, tasks, jobs, pools, master;
  try {
    [agents, tasks, jobs, pools, master] = await Promise.all([
      getJSON("/api/v1/agents").then((r) => r.agents || []),
      getJSON("/api/v1/tasks").then((r) => r.allocationIdToSummary || {}),
      getJSON("/api/v1/job-queues").then((r) => r.jobs || []),
      getJSON("/api/v1/resource-pools").then((r) => r.resourcePools || []),
      getJSON("/api/v1/master"),
    ]);
  } catch (e) {
    showError(e);
    return;
  }
  const isolation = master.taskIsolation;
  document.getElementById("isolation").textContent = isolation ? `Task isolation: ${isolation.detail}` : "";
  document.getElementById("isolation").dataset.mode = isolation ? isolation.mode : "";
  const pool = pools[0];
  document.getElementById("pool").textContent = pool ? `pool ${pool.name}: ${pool.slotsUsed} of ${pool.slotsAvailable} available slots in use, ${pool.numAgents} agent(s)` : "";
  const rows = [];
  for (const a of agents) {
    rows.push({ kind: "agent", id: a.id, path: a.id, x: a, _attrs: { "data-agent-id": a.id, "data-state": stateOf(a), class: "agent-row" } });
    for (const s of Object.values(a.slots || {})) {
      const alloc = s.container ? s.container.id : null;
      rows.push({ kind: "slot", id: `${a.id} / slot ${s.id}`, path: `${a.id}/slots/${s.id}`, x: s, alloc, task: alloc && tasks[alloc] ? tasks[alloc].name : "", _attrs: { "data-slot": `${a.id}/${s.id}`, "data-state": stateOf(s) } });
    }
  }
  const columns = [
    { key: "id", label: "Agent / slot", value: (r) => r.id, render: (r) => (r.kind === "agent" ? el("strong", {}, r.id) : r.id) },
    { key: "state", label: "State", value: (r) => stateOf(r.x), render: (r) => el("span", { class: "state " + stateOf(r.x) }, stateOf(r.x)) },
    { key: "alloc", label: "Allocation", value: (r) => r.alloc || "", render: (r) => (r.kind === "slot" ? r.alloc || "FREE" : `${Object.keys(r.x.containers || {}).length} running`) },
    { key: "task", label: "Task", value: (r) => r.task || "" },
    { key: "actions", label: "Actions", value: () => 0, render: (r) => buttons(r.path, r.x) },
  ];
  document.getElementById("slots").replaceChildren(rows.length ? sortableTable(columns, rows) : el("span", { class: "muted" }, "No agents: the master runs without a resource manager."));
  jobs.forEach((j) => (j._attrs = { "data-job-id": j.jobId }));
  const jobColumns = [
    { key: "ahead", label: "#", value: (j) => j.summary.jobsAhead },
    { key: "job", label: "Job", value: (j) => j.jobId, render: (j) => el("a", { href: `/experiments/${j.entityId}` }, `${j.name} (${j.entityId})`) },
    { key: "priority", label: "Priority", value: (j) => j.priority },
    { key: "state", label: "State", value: (j) => j.summary.state, render: (j) => stateBadge(j.summary.state) },
    { key: "slots", label: "Slots (acquired/needed)", value: (j) => j.allocatedSlots, render: (j) => `${j.allocatedSlots}/${j.requestedSlots}` },
    { key: "user", label: "User", value: (j) => j.username },
  ];
  document.getElementById("jobs").replaceChildren(jobs.length ? sortableTable(jobColumns, jobs, { key: "ahead" }) : el("span", { class: "muted" }, "No jobs: every experiment has ended."));
  document.getElementById("updated").textContent = " updated " + new Date().toLocaleTimeString();
}

document.addEventListener("DOMContentLoaded", () => {
  showWho();
  refresh();
  setInterval(refresh, POLL_MS);
});
