// The model registry: /models lists models; /models/NAME shows one model and its versions,
// each linked to its checkpoint's trial and experiment.
"use strict";

const modelName = () => {
  const parts = location.pathname.split("/").filter(Boolean);
  return parts.length > 1 ? decodeURIComponent(parts[1]) : null;
};
const modelPath = (name) => `/api/v1/models/${encodeURIComponent(name)}`;
const labelList = (labels) => el("span", { class: "labels" }, (labels || []).map((l) => el("span", { class: "label" }, l)).flatMap((x) => [x, " "]));

async function workspaceNames() {
  const names = new Map();
  for (const w of (await getJSON("/api/v1/workspaces")).workspaces) names.set(w.id, w.name);
  return names;
}

async function listModels() {
  const archived = document.getElementById("show-archived").checked;
  let models, names;
  try {
    [models, names] = await Promise.all([getJSON("/api/v1/models" + (archived ? "" : "?archived=false")).then((r) => r.models), workspaceNames()]);
  } catch (e) {
    showError(e);
    return;
  }
  const link = (m, text) => el("a", { href: `/models/${encodeURIComponent(m.name)}` }, text);
  const columns = [
    { key: "id", label: "ID", value: (m) => m.id, render: (m) => link(m, String(m.id)) },
    { key: "name", label: "Name", value: (m) => m.name, render: (m) => link(m, m.name) },
    { key: "description", label: "Description", value: (m) => m.description },
    { key: "versions", label: "Versions", value: (m) => m.numVersions },
    { key: "labels", label: "Labels", value: (m) => (m.labels || []).join(","), render: (m) => labelList(m.labels) },
    { key: "workspace", label: "Workspace", value: (m) => names.get(m.workspaceId) || String(m.workspaceId) },
    { key: "updated", label: "Last updated", value: (m) => m.lastUpdatedTime, render: (m) => fmtWhen(m.lastUpdatedTime) },
    { key: "user", label: "User", value: (m) => m.username },
  ];
  models.forEach((m) => (m._attrs = { "data-model": m.name, "data-archived": String(m.archived) }));
  const box = document.getElementById("models");
  box.replaceChildren(models.length ? sortableTable(columns, models, { key: "updated", desc: true }) : el("span", { class: "muted" }, "No models yet: det model create NAME, then det model register-version NAME CHECKPOINT_UUID"));
}

async function showModel(name) {
  let model, versions, names;
  try {
    [model, versions, names] = await Promise.all([
      getJSON(modelPath(name)).then((r) => r.model),
      getJSON(modelPath(name) + "/versions?orderBy=ORDER_BY_DESC").then((r) => r.modelVersions),
      workspaceNames(),
    ]);
  } catch (e) {
    if (e.status === 404) return showNotFound("Model");
    showError(e);
    return;
  }
  document.title = `${model.name} · Models · redetermined`;
  document.getElementById("title").textContent = `Model ${model.name}`;
  document.getElementById("list-controls").remove();
  const summary = document.getElementById("summary");
  summary.hidden = false;
  const kv = [
    ["Description", model.description || "—"],
    ["Workspace", names.get(model.workspaceId) || String(model.workspaceId)],
    ["Labels", labelList(model.labels)],
    ["Metadata", el("pre", { class: "config" }, JSON.stringify(model.metadata || {}, null, 2))],
    ["Owner", model.username],
    ["Created", fmtTime(model.creationTime)],
    ["Archived", model.archived ? "yes" : "no"],
    ["Notes", model.notes || "—"],
  ];
  summary.replaceChildren(el("dl", { class: "kv" }, kv.map(([k, v]) => [el("dt", {}, k), el("dd", { "data-key": k }, v instanceof Node ? v : String(v))])));
  const metrics = (v) => ((v.checkpoint.training || {}).validationMetrics || {}).avgMetrics || {};
  const columns = [
    { key: "version", label: "Version", value: (v) => v.version },
    { key: "name", label: "Name", value: (v) => v.name },
    { key: "uuid", label: "Checkpoint", value: (v) => v.checkpoint.uuid, render: (v) => el("code", {}, v.checkpoint.uuid) },
    { key: "state", label: "State", value: (v) => v.checkpoint.state, render: (v) => stateBadge(v.checkpoint.state) },
    { key: "experiment", label: "Experiment", value: (v) => v.checkpoint.training.experimentId, render: (v) => el("a", { href: `/experiments/${v.checkpoint.training.experimentId}` }, String(v.checkpoint.training.experimentId)) },
    { key: "trial", label: "Trial", value: (v) => v.checkpoint.training.trialId, render: (v) => el("a", { href: `/trials/${v.checkpoint.training.trialId}` }, String(v.checkpoint.training.trialId)) },
    { key: "steps", label: "Batches", value: (v) => (v.checkpoint.metadata || {}).steps_completed },
    { key: "metrics", label: "Validation metrics", value: (v) => JSON.stringify(metrics(v)), render: (v) => Object.entries(metrics(v)).map(([k, x]) => el("div", {}, `${k}: ${fmtNum(x)}`)) },
    { key: "labels", label: "Labels", value: (v) => (v.labels || []).join(","), render: (v) => labelList(v.labels) },
    { key: "created", label: "Registered", value: (v) => v.creationTime, render: (v) => fmtWhen(v.creationTime) },
    { key: "download", label: "Files", value: () => 0, render: (v) => downloadButton(v.checkpoint) },
  ];
  versions.forEach((v) => (v._attrs = { "data-version": v.version }));
  document.getElementById("models").replaceChildren(
    el("h2", {}, "Versions"),
    versions.length ? sortableTable(columns, versions, { key: "version", desc: true }) : el("span", { class: "muted" }, `No versions yet: det model register-version ${model.name} CHECKPOINT_UUID`)
  );
}

document.addEventListener("DOMContentLoaded", () => {
  showWho();
  const name = modelName();
  if (name === null) {
    document.getElementById("show-archived").addEventListener("change", listModels);
    listModels();
  } else {
    showModel(name);
  }
});
