// Commands, notebooks, shells and TensorBoards (docs/tasks.md): polled every 2 s, with Open
// (through the master's proxy) and Kill.
"use strict";

const TASKS_POLL_MS = 2000;
// route noun -> [JSON list key, label]
const KINDS = {
  commands: ["commands", "Command"],
  notebooks: ["notebooks", "Notebook"],
  shells: ["shells", "Shell"],
  tensorboards: ["tensorboards", "TensorBoard"],
};

// The proxy reads the login from the `auth` cookie (a browser tab sends no bearer token). It
// is scoped to /proxy/, so the master's own API never sees it.
function setProxyCookie() {
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) document.cookie = `auth=${token}; path=/proxy/; SameSite=Strict`;
}

async function killTask(noun, task) {
  if (!confirm(`Kill ${KINDS[noun][1].toLowerCase()} ${task.id}?`)) return;
  try {
    await postJSON(`/api/v1/${noun}/${task.id}/kill`);
    showError(null);
  } catch (e) {
    showError(`kill ${task.id}: ${e.message}`);
  }
  refreshTasks();
}

function taskActions(task) {
  const out = [];
  if (task.serviceAddress && task.state === "STATE_RUNNING") {
    out.push(el("a", { class: "button", href: task.serviceAddress, target: "_blank", "data-action": "open", onclick: setProxyCookie }, "Open"));
  }
  if (task.state !== "STATE_TERMINATED") {
    out.push(el("button", { class: "danger", "data-action": "kill", onclick: () => killTask(task.noun, task) }, "Kill"));
  }
  return el("span", { class: "actions" }, out.flatMap((x) => [x, " "]));
}

async function refreshTasks() {
  const showEnded = document.getElementById("show-ended").checked;
  let tasks = [];
  try {
    for (const [noun, [key, label]] of Object.entries(KINDS)) {
      const found = (await getJSON(`/api/v1/${noun}`))[key];
      tasks.push(...found.map((t) => ({ ...t, noun, kind: label })));
    }
  } catch (e) {
    showError(e);
    return;
  }
  if (!showEnded) tasks = tasks.filter((t) => t.state !== "STATE_TERMINATED");
  const columns = [
    { key: "id", label: "ID", value: (t) => t.id, render: (t) => el("code", {}, t.id.slice(0, 8)) },
    { key: "kind", label: "Type", value: (t) => t.kind },
    { key: "description", label: "Description", value: (t) => t.description },
    { key: "state", label: "State", value: (t) => t.state, render: (t) => stateBadge(t.state) },
    { key: "exit", label: "Exit status", value: (t) => t.exitStatus || "" },
    { key: "start", label: "Started", value: (t) => t.startTime, render: (t) => fmtWhen(t.startTime) },
    { key: "user", label: "User", value: (t) => t.username },
    { key: "actions", label: "Actions", value: () => 0, render: taskActions },
  ];
  tasks.forEach((t) => (t._attrs = { "data-task-id": t.id, "data-state": t.state }));
  const box = document.getElementById("tasks");
  const prev = box.querySelector("th.sorted-asc, th.sorted-desc");
  const sort = prev ? { key: prev.dataset.key, desc: prev.classList.contains("sorted-desc") } : { key: "start", desc: true };
  box.replaceChildren(
    tasks.length ? sortableTable(columns, tasks, sort) : el("span", { class: "muted" }, "No tasks: det cmd run, det notebook start, det shell start, det tensorboard start")
  );
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("show-ended").addEventListener("change", refreshTasks);
  showWho();
  refreshTasks();
  setInterval(refreshTasks, TASKS_POLL_MS);
});
