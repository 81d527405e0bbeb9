"""0.37's non-trial tasks over REST: ``/api/v1/commands``, ``/api/v1/notebooks``,
``/api/v1/shells``, ``/api/v1/tensorboards`` (launch, list, get, kill) and
``POST /api/v1/generic-tasks``. Each is a row of ``store._tasks`` that the resource manager
starts on the same slots as trials (``resources._tasks`` decides its process); notebooks and
TensorBoards are reached through ``/proxy/<id>/`` and shells through its websocket (docs/tasks.md).
"""

from __future__ import annotations

import datetime
import getpass
import json
import os
import pathlib
import subprocess
import tempfile
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Body, Query, Request
from starlette.concurrency import run_in_threadpool

from determined.common import storage
from determined.master import experiment
from determined.master._errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from determined.master.api import _redact
from determined.master.api._auth import Caller, Principal
from determined.master.api._deps import StoreDep
from determined.master.api._model_definition import tar_model_definition
from determined.master.api._services import services
from determined.master.resources import _tasks
from determined.master.resources._launcher import LaunchError
from determined.master.store import Store, _experiments, _projects, _templates, _trials, _users
from determined.master.store import _tasks as _task_rows
from determined.master.store._time import rfc3339
from determined.tensorboard import get_sync_path

router = APIRouter(prefix="/api/v1")

# type -> (route noun, JSON key of one, of the list, job type, default slots, description)
KINDS: dict[str, tuple[str, str, str, str, int, str]] = {
    "COMMAND": ("commands", "command", "commands", "TYPE_COMMAND", 1, "Command"),
    "NOTEBOOK": ("notebooks", "notebook", "notebooks", "TYPE_NOTEBOOK", 1, "JupyterLab"),
    "SHELL": ("shells", "shell", "shells", "TYPE_SHELL", 1, "Shell"),
    "TENSORBOARD": (
        "tensorboards",
        "tensorboard",
        "tensorboards",
        "TYPE_TENSORBOARD",
        0,
        "TensorBoard",
    ),
    "GENERIC": ("tasks", "task", "tasks", "TYPE_GENERIC", 1, "Generic task"),
}
MAX_CONTEXT_BYTES = 96 * 1024 * 1024
# A task's fields at their zero values: what a preview answers in place of a launched one
# (0.37's clients read these keys).
_EMPTY_TASK = {
    "id": "",
    "description": "",
    "state": "STATE_UNSPECIFIED",
    "startTime": None,
    "username": "",
    "resourcePool": "",
    "jobId": "",
    "workspaceId": 0,
}


def wake(request: Request) -> None:
    """Have the resource manager look at its tasks now (one was queued or asked to stop)."""
    rm = services(request).rm
    if rm is not None:
        rm.wake()


def _require_rm(request: Request, kind: str) -> None:
    rm = services(request).rm
    if rm is None:
        raise InvalidArgument(
            "this master runs no resource manager, so no commands, notebooks, shells or "
            "TensorBoards (start it with --resource-manager local or slurm)"
        )
    refusal = rm.task_refusal(kind)
    if refusal is not None:
        raise InvalidArgument(refusal)


def task_json(
    conn: sa.Connection, row: dict[str, Any], viewer: Principal | None = None
) -> dict[str, Any]:
    """``v1Command`` / ``v1Notebook`` / ``v1Shell`` / ``v1Tensorboard`` of a task row, as
    ``viewer`` may see it: a shell's private key goes to its owner only (an admin gets the
    rest of it; 0.37 hands it to whoever may open the shell, docs/security.md)."""
    kind = str(row["type"])
    owner = _users.get_user(conn, int(row["owner_id"])) or {"username": ""}
    out: dict[str, Any] = {
        "id": row["id"],
        "description": row["description"],
        "state": f"STATE_{row['state']}",
        "startTime": rfc3339(row["start_time"]),
        "username": owner["username"],
        "userId": row["owner_id"],
        "displayName": owner.get("display_name") or owner["username"],
        "resourcePool": "default",
        "workspaceId": int((row["data"] or {}).get("workspaceId") or 1),
        "jobId": row["id"],
        "exitStatus": row["exit_status"],
    }
    if row["allocation_id"]:
        out["container"] = {
            "id": row["allocation_id"],
            "state": "STATE_RUNNING" if row["state"] == "RUNNING" else "STATE_TERMINATED",
            "devices": [],
        }
    data = row["data"] or {}
    if kind in ("NOTEBOOK", "TENSORBOARD"):
        out["serviceAddress"] = f"/proxy/{row['id']}/"
    if kind == "TENSORBOARD":
        out["experimentIds"] = list(data.get("experimentIds") or [])
        out["trialIds"] = list(data.get("trialIds") or [])
    if kind == "SHELL":
        mine = viewer is not None and viewer.info.user_id == int(row["owner_id"])
        out["privateKey"] = data.get("privateKey") if mine else None
        out["publicKey"] = data.get("publicKey")
        out["addresses"] = [
            {"host_ip": "127.0.0.1", "host_port": port} for port in (row["ports"] or {}).values()
        ]
        # sshd runs as the task's OS user (the master's, or the linked one): the only login.
        out["agentUserGroup"] = {"user": data.get("user")}
    return out


def _context(files: Any) -> bytes | None:
    """A legacy context (``v1File`` list) as the tar.gz the task unpacks; None for none."""
    if not files:
        return None
    if not isinstance(files, list):
        raise InvalidArgument("files must be a list of v1File entries (det cmd run --context)")
    return tar_model_definition(files)


def _config(
    store: Store, body: dict[str, Any], kind: str, defaults: experiment.ContainerDefaults
) -> dict[str, Any]:
    config = body.get("config") or {}
    if isinstance(config, str):
        config = experiment.load_yaml(config, "config") or {}
    if not isinstance(config, dict):
        raise InvalidArgument("config must be a mapping of task config fields")
    template = body.get("templateName") or body.get("template_name")
    if template:
        with store.read() as conn:
            row = _templates.get(conn, str(template))
        if row is None:
            raise InvalidArgument(f"template {template!r} not found; det template list shows them")
        config = experiment.merge_configs(dict(row["config"] or {}), config)
    config = dict(config)
    resources = dict(config.get("resources") or {})
    resources.setdefault("slots", KINDS[kind][4])
    config["resources"] = resources
    if kind == "NOTEBOOK":
        config.setdefault("idle_timeout", None)
        try:
            _tasks.idle_seconds(config["idle_timeout"])
        except LaunchError as e:
            raise InvalidArgument(str(e)) from e
    try:
        _tasks.check_environment(config)
    except LaunchError as e:
        raise InvalidArgument(str(e)) from e
    return _image_per_accelerator(defaults.apply(config, experiment=False))


_ACCELERATORS = ("cpu", "cuda", "rocm")


def _image_per_accelerator(config: dict[str, Any]) -> dict[str, Any]:
    """``environment.image`` given as one name stands for every accelerator's, as 0.37's
    config shows it (``{cpu, cuda, rocm}``). This master runs no images: it is recorded."""
    environment = config.get("environment")
    if isinstance(environment, dict) and isinstance(environment.get("image"), str):
        image = environment["image"]
        config = {
            **config,
            "environment": {**environment, "image": dict.fromkeys(_ACCELERATORS, image)},
        }
    return config


def _inherit_environment(
    store: Store, config: dict[str, Any], exp_ids: list[int]
) -> dict[str, Any]:
    """A TensorBoard without an image of its own takes its first experiment's image, with its
    pod spec's imagePullSecrets, and its registry_auth when it has none (0.37)."""
    if not exp_ids:
        return config
    with store.read() as conn:
        exp_env = (_experiments.require_experiment(conn, exp_ids[0])["config"] or {}).get(
            "environment"
        ) or {}
    environment = dict(config.get("environment") or {})
    if not environment.get("image"):
        image = exp_env.get("image")
        if image:
            environment["image"] = (
                dict.fromkeys(_ACCELERATORS, image) if isinstance(image, str) else dict(image)
            )
        secrets = ((exp_env.get("pod_spec") or {}).get("spec") or {}).get("imagePullSecrets")
        if secrets:
            pod = dict(environment.get("pod_spec") or {})
            spec = dict(pod.get("spec") or {})
            spec["imagePullSecrets"] = [*(spec.get("imagePullSecrets") or []), *secrets]
            environment["pod_spec"] = {**pod, "spec": spec}
    if environment.get("registry_auth") is None and exp_env.get("registry_auth") is not None:
        environment["registry_auth"] = exp_env["registry_auth"]
    return {**config, "environment": environment}


def _sent_slots(body: dict[str, Any]) -> Any:
    """The ``resources.slots`` of the config in the request itself (None when it has none)."""
    config = body.get("config")
    if isinstance(config, str):
        config = experiment.load_yaml(config, "config")
    resources = config.get("resources") if isinstance(config, dict) else None
    return resources.get("slots") if isinstance(resources, dict) else None


def _slots(request: Request, config: dict[str, Any], sent: Any = None) -> int:
    """The task's slots (``config`` is the merged config). A task runs on one agent: as 0.37,
    a request whose own ``resources.slots`` (``sent``) is larger than every agent is refused at
    once; 0.37 checks it before laying the template under it, so a template's larger value is
    kept and the task waits."""
    try:
        slots = int(config["resources"]["slots"])
    except (TypeError, ValueError) as e:
        raise InvalidArgument("resources.slots must be an integer") from e
    if slots < 0:
        raise InvalidArgument(f"resources.slots is {slots}; it must be 0 or more")
    rm = services(request).rm
    agents = (rm.agents or [rm.slots]) if rm is not None else [[]]
    have = max(len(a) for a in agents)
    if sent is not None and slots > have:
        raise InvalidArgument(
            "request unfulfillable, please try requesting less slots: resources.slots is "
            f"{slots}, and the largest agent of this master has {have}"
        )
    return slots


def _description(config: dict[str, Any], kind: str, task_hint: str) -> str:
    given = config.get("description")
    if given:
        return str(given)
    return f"{KINDS[kind][5]} ({task_hint})"


def _workspace_of(store: Store, value: Any) -> int:
    """The workspace a task is launched in (``workspaceId``; 0 or none: 1, Uncategorized)."""
    if value in (None, "", 0):
        return 1
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).isdigit():
        raise InvalidArgument(f"workspaceId must be a workspace's id (an integer), not {value!r}")
    with store.read() as conn:
        workspace = _projects.require_workspace(conn, int(value))
    if workspace["archived"]:
        # 404 as 0.37: an archived workspace takes no new tasks.
        raise NotFound(
            f"workspace {workspace['name']!r} ({value}) is archived: unarchive it or launch "
            "elsewhere"
        )
    return int(value)


def _keypair(passphrase: str = "") -> dict[str, str]:
    """A fresh ssh key pair for one shell (OpenSSH's own format); the private key encrypted
    with ``passphrase`` when one is given (``det shell start -p``)."""
    with tempfile.TemporaryDirectory(prefix="det-shell-key-") as tmp:
        path = os.path.join(tmp, "key")
        try:
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", "det-shell"]
                + ["-f", path],
                check=True,
                capture_output=True,
            )
        except (OSError, subprocess.CalledProcessError) as e:
            raise InvalidArgument(f"cannot make a key pair for the shell (ssh-keygen): {e}") from e
        return {
            "privateKey": pathlib.Path(path).read_text(),
            "publicKey": pathlib.Path(path + ".pub").read_text().strip(),
        }


def _logdirs(store: Store, exp_ids: list[int], trial_ids: list[int]) -> dict[str, str]:
    """Run name -> the directory of one trial's synced TensorBoard files."""
    with store.read() as conn:
        pairs: list[tuple[int, int]] = []
        for exp_id in exp_ids:
            _experiments.require_experiment(conn, exp_id)
            pairs += [(exp_id, int(t["id"])) for t in _trials.trials_of(conn, exp_id)]
        for trial_id in trial_ids:
            trial = _trials.require_trial(conn, trial_id)
            pairs.append((int(trial["experiment_id"]), trial_id))
        configs = {
            e: dict(_experiments.require_experiment(conn, e)["config"] or {})
            for e in {p[0] for p in pairs}
        }
    several = len(configs) > 1
    found: dict[str, str] = {}
    for exp_id, trial_id in dict.fromkeys(pairs):
        raw = configs[exp_id].get("checkpoint_storage") or {}
        try:
            manager = storage.build(raw)
        except Exception as e:
            raise InvalidArgument(f"experiment {exp_id}: bad checkpoint_storage: {e}") from e
        if not isinstance(manager, storage.DirectoryStorageManager):
            raise InvalidArgument(
                f"experiment {exp_id} keeps its files in {raw.get('type')!r} storage; a "
                "TensorBoard task reads shared_fs and directory storage (for s3/gcs run "
                "det tensorboard start --local, which downloads them)"
            )
        name = f"exp_{exp_id}_trial_{trial_id}" if several else f"trial_{trial_id}"
        found[name] = str(
            pathlib.Path(manager.base_path) / get_sync_path(store.cluster_id, exp_id, trial_id)
        )
    if not found:
        raise InvalidArgument(f"no trials found in experiment(s) {exp_ids} / trials {trial_ids}")
    return found


def _launch(
    request: Request,
    caller: Principal,
    store: Store,
    body: Any,
    kind: str,
    *,
    context: bytes | None = None,
    more_data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Queue a task of ``kind``; ``context``: its context archive when the body has no
    ``files`` (a fork's or parent's); ``more_data``: kept in its row's ``data``."""
    caller.require_user()
    _require_rm(request, kind)
    refusal = services(request).sandbox.refusal(caller.info.username, caller.info.admin)
    if refusal is not None:  # no sandbox here, and not a single-user account (docs/security.md)
        raise FailedPrecondition(refusal)
    if not isinstance(body, dict):
        raise InvalidArgument("the request body must be a JSON object")
    config = _config(store, body, kind, services(request).container_defaults)
    slots = _slots(request, config, _sent_slots(body))
    context = _context(body.get("files")) or context
    data: dict[str, Any] = {}
    if kind == "GENERIC" and not config.get("entrypoint"):
        raise InvalidArgument("config.entrypoint is missing: give the command to run")
    # A command without an entrypoint is accepted and exits 0 at once, as 0.37's (its
    # container's entrypoint script execs an empty argv).
    if kind == "TENSORBOARD":
        exp_ids = [int(x) for x in body.get("experimentIds") or []]
        trial_ids = [int(x) for x in body.get("trialIds") or []]
        if not exp_ids and not trial_ids:
            raise InvalidArgument("give experimentIds or trialIds for a TensorBoard")
        data = {
            "experimentIds": exp_ids,
            "trialIds": trial_ids,
            "logdirs": _logdirs(store, exp_ids, trial_ids),
        }
        config = _inherit_environment(store, config, exp_ids)
    if kind == "SHELL":
        extra = body.get("data")
        passphrase = str(extra.get("passphrase") or "") if isinstance(extra, dict) else ""
        data = {**_keypair(passphrase), "user": getpass.getuser()}
    data["workspaceId"] = _workspace_of(store, body.get("workspaceId"))
    if kind == "SHELL":
        # sshd runs as the task's OS user (docs/security.md): ssh logs in as that one.
        with store.read() as conn:
            identity = services(request).sandbox.identity(
                conn, caller.info.user_id, data["workspaceId"]
            )
        if identity is not None:
            data["user"] = identity.user
    data.update(more_data or {})
    hint = ""
    if kind == "TENSORBOARD":
        ids = data["experimentIds"] or data["trialIds"]
        what = "Experiment" if data["experimentIds"] else "Trial"
        hint = f"{what} ({', '.join(str(i) for i in ids)})"
    with store.tx() as conn:
        row = _task_rows.create(
            conn,
            type=kind,
            owner_id=caller.info.user_id,
            description="",
            config=config,
            slots=slots,
            context=context,
            data=data,
        )
        description = _description(config, kind, hint or str(row["id"])[:8])
        _task_rows.set_description(conn, str(row["id"]), description)
        row["description"] = description
        out = task_json(conn, row, caller)
    wake(request)
    return out


def _check_owner(caller: Principal, row: dict[str, Any], action: str) -> None:
    caller.require_user()
    if not caller.info.admin and int(row["owner_id"]) != caller.info.user_id:
        raise PermissionDenied(
            f"{str(row['type']).lower()} {row['id']} is not yours: only its owner or an admin "
            f"may {action} it"
        )


def _check_tree_owner(caller: Principal, nodes: list[dict[str, Any]], action: str) -> None:
    """``_check_owner`` for every task an action on a tree reaches (kill from the root,
    pause, unpause): a task of someone else's in it refuses the whole action."""
    for node in nodes:
        _check_owner(caller, node, action)


def _body(raw: bytes) -> Any:
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError as e:
        raise InvalidArgument(f"the request body is not JSON: {e}") from e


def _register(kind: str) -> None:
    noun, one, many, _job, _slots_default, _desc = KINDS[kind]
    if kind == "GENERIC":
        return

    @router.post(f"/{noun}", name=f"launch_{one}")
    async def launch(request: Request, caller: Caller, store: StoreDep) -> dict[str, Any]:
        body = _body(await request.body())
        if kind == "NOTEBOOK" and isinstance(body, dict) and body.get("preview"):
            # ``det notebook start --preview``: the config it would run with, nothing launched.
            caller.require_user()
            defaults = services(request).container_defaults
            preview = await run_in_threadpool(_config, store, body, kind, defaults)
            return {one: _EMPTY_TASK, "config": preview, "warnings": []}  # the caller's own
        task = await run_in_threadpool(_launch, request, caller, store, body, kind)
        given = body.get("config") if isinstance(body, dict) else None
        return {one: task, "config": given or {}, "warnings": []}  # the launcher's own

    @router.get(f"/{noun}", name=f"list_{many}")
    def list_(
        caller: Caller,
        store: StoreDep,
        users: list[str] = Query(default=[]),
        workspace_id: int = Query(0, alias="workspaceId", ge=0),
    ) -> dict[str, Any]:
        """Every task of the kind, oldest first; ``users`` keeps those usernames',
        ``workspaceId`` (not 0) those of that workspace (0.37)."""
        caller.require_user()
        wanted = {u for item in users for u in item.split(",") if u}
        with store.read() as conn:
            if workspace_id:
                _projects.require_workspace(conn, workspace_id)  # 404 for one deleted (0.37)
            rows = _task_rows.list_tasks(conn, kind)
            # Those of a deleted workspace are gone with it (it killed them), as in 0.37.
            kept = {int(w["id"]) for w in _projects.list_workspaces(conn)}
            items = [task_json(conn, r, caller) for r in rows]
        items = [t for t in items if t["workspaceId"] in kept]
        if wanted:
            items = [t for t in items if t["username"] in wanted]
        if workspace_id:
            items = [t for t in items if t["workspaceId"] == workspace_id]
        total = len(items)
        return {
            many: items,
            "pagination": {
                "offset": 0,
                "limit": 0,
                "startIndex": 0,
                "endIndex": total,
                "total": total,
            },
        }

    @router.get(f"/{noun}/{{task_id}}", name=f"get_{one}")
    def get(task_id: str, caller: Caller, store: StoreDep) -> dict[str, Any]:
        caller.require_user()
        with store.read() as conn:
            row = _task_rows.require(conn, task_id, kind)
            config = _redact.shown(row["config"], caller.owns(row["owner_id"]))
            return {one: task_json(conn, row, caller), "config": config}

    @router.post(f"/{noun}/{{task_id}}/kill", name=f"kill_{one}")
    def kill(task_id: str, request: Request, caller: Caller, store: StoreDep) -> dict[str, Any]:
        with store.tx() as conn:
            row = _task_rows.require(conn, task_id, kind)
            _check_owner(caller, row, "kill")
            _task_rows.request_kill(conn, task_id)
            row = _task_rows.require(conn, task_id)
            out = task_json(conn, row, caller)
        wake(request)
        return {one: out}

    @router.post(f"/{noun}/{{task_id}}/set_priority", name=f"set_{one}_priority")
    def set_priority(
        task_id: str, request: Request, caller: Caller, store: StoreDep, body: Any = Body(...)
    ) -> dict[str, Any]:
        """``{priority}`` (1 to 99, 1 first): written to the task's ``resources.priority``,
        which orders queued tasks and shows in the job queue (0.37's ``Set*Priority``)."""
        priority = body.get("priority") if isinstance(body, dict) else None
        if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 99:
            raise InvalidArgument(
                f"priority must be an integer from 1 to 99 (1 runs first), not {priority!r}"
            )
        with store.tx() as conn:
            row = _task_rows.require(conn, task_id, kind)
            _check_owner(caller, row, "set the priority of")
            if row["state"] not in _task_rows.LIVE:
                raise FailedPrecondition(
                    f"{one} {task_id} has ended; its priority no longer matters"
                )
            config = dict(row["config"] or {})
            config["resources"] = {**(config.get("resources") or {}), "priority": priority}
            _task_rows.set_config(conn, task_id, config)
            out = task_json(conn, _task_rows.require(conn, task_id), caller)
        wake(request)
        return {one: out}


for _kind in KINDS:
    _register(_kind)


@router.post("/generic-tasks")
async def create_generic_task(request: Request, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """``CreateGenericTask`` (``det task create|fork``): ``config`` is YAML text, the context a
    ``contextDirectory`` of ``v1File``. ``forkedFrom``: start from that task's config (the
    given keys replace its top-level ones) and, without files, its context; ``parentId``
    makes it that task's child (kill and pause act on a task's subtree), and with
    ``inheritContext`` it runs in the parent's context; ``noPause``: a pause of its parent
    passes it by; ``projectId``: the project it belongs to (default 1)."""
    raw = _body(await request.body())
    if not isinstance(raw, dict):
        raise InvalidArgument("the request body must be a JSON object")
    return await run_in_threadpool(_create_generic, request, caller, store, raw)


def _create_generic(
    request: Request, caller: Principal, store: Store, raw: dict[str, Any]
) -> dict[str, Any]:
    config: Any = raw.get("config") or {}
    if isinstance(config, str):
        config = experiment.load_yaml(config, "config") or {}
    if not isinstance(config, dict):
        raise InvalidArgument("config must be a mapping of task config fields")
    forked_from, parent_id = raw.get("forkedFrom"), raw.get("parentId")
    project_id = raw.get("projectId")
    context: bytes | None = None
    with store.read() as conn:
        if forked_from:
            forked = _generic_task(conn, str(forked_from))
            # A fork runs the task's config (secrets too) and context: the owner's only.
            _check_owner(caller, forked, "fork")
            # What det task config shows of the fork: the forked task's own given config
            # under this request's.
            forked_given = (forked["data"] or {}).get("givenConfig")
            given = {**(forked_given if forked_given is not None else {}), **config}
            config = {**(forked["config"] or {}), **config}
            context = forked["context"]
        if parent_id:
            parent = _generic_task(conn, str(parent_id))
            # A child is killed and paused with its tree: nobody hangs a task under another's.
            _check_owner(caller, parent, "make a child of")
            if raw.get("inheritContext"):
                context = parent["context"]
        elif raw.get("inheritContext"):
            raise InvalidArgument("inheritContext needs a parentId: the task to inherit from")
        if project_id is not None:
            if isinstance(project_id, bool) or not isinstance(project_id, int):
                raise InvalidArgument(f"projectId must be an integer, not {project_id!r}")
            _projects.require_project(conn, project_id)
    if not config:
        raise InvalidArgument("no config and no forked task: give a config file or --fork ID")
    more = {
        "forkedFrom": forked_from or None,
        "parentId": parent_id or None,
        "noPause": bool(raw.get("noPause")),
        "projectId": int(project_id or 1),
        # What det task config shows, as 0.37: the config as given, without the defaults.
        "givenConfig": given if forked_from else config,
    }
    if raw.get("inheritContext"):
        context_files = None  # the parent's, even if files were sent
    else:
        context_files = raw.get("contextDirectory") or []
    body = {"config": config, "files": context_files}
    task = _launch(request, caller, store, body, "GENERIC", context=context, more_data=more)
    return {"taskId": task["id"], "warnings": []}


def _generic_task(conn: sa.Connection, task_id: str) -> dict[str, Any]:
    row = _task_rows.get(conn, task_id)
    if row is None or row["type"] != "GENERIC":
        raise NotFound(f"generic task {task_id!r} not found (det task list shows live ones)")
    return row


@router.get("/tasks/{task_id}")
def get_task(task_id: str, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """``GetTask``: a non-trial task's (or a trial's task's) ``v1Task`` with its allocations."""
    caller.require_user()
    with store.read() as conn:
        row = _task_rows.get(conn, task_id)
        if row is not None:
            return {"task": _v1_task(row, caller.owns(row["owner_id"]))}
        trial = _trials.trial_by_task(conn, task_id)
        if trial is None:
            raise NotFound(f"task {task_id!r} not found")
        allocations = _trials.allocations_of(conn, int(trial["id"]))
        task_ids = _trials.task_ids_of(conn, trial)
    # A continued trial has a task per continue (0.37): this one's runs; it started with the
    # trial (the first task) or its first run, and ended with the trial (the current task)
    # or its last run.
    allocations = [a for a in allocations if a["task_id"] == task_id]
    start: datetime.datetime | None = trial["start_time"]
    end: datetime.datetime | None = trial["end_time"]
    if task_id != task_ids[0]:
        start = allocations[0]["start_time"] if allocations else None
    if task_id != task_ids[-1]:
        end = allocations[-1]["end_time"] if allocations else None
    return {
        "task": {
            "taskId": task_id,
            "taskType": "TASK_TYPE_TRIAL",
            "startTime": rfc3339(start),
            "endTime": rfc3339(end),
            "allocations": [_v1_trial_allocation(task_id, a) for a in allocations],
        }
    }


def _v1_task(row: dict[str, Any], whole: bool) -> dict[str, Any]:
    """``whole``: the config with its secrets (for its owner and admins, ``_redact.shown``)."""
    data = row["data"] or {}
    out: dict[str, Any] = {
        "taskId": row["id"],
        "taskType": f"TASK_TYPE_{row['type']}",
        "startTime": rfc3339(row["start_time"]),
        "endTime": rfc3339(row["end_time"]),
        "allocations": [],
    }
    if row["allocation_id"]:
        running = row["state"] == "RUNNING"
        out["allocations"] = [
            {
                "allocationId": row["allocation_id"],
                "taskId": row["id"],
                "state": "STATE_RUNNING" if running else "STATE_TERMINATED",
                "slots": int(row["slots"]),
                "isReady": running,
                "startTime": rfc3339(row["start_time"]),
                "endTime": None if running else rfc3339(row["end_time"]),
                "exitReason": row["exit_status"],
            }
        ]
    if row["type"] == "GENERIC":
        out.update(
            taskState=_generic_state(row),
            config=json.dumps(_redact.shown(row["config"] or {}, whole)),
            forkedFrom=data.get("forkedFrom"),
            parentId=data.get("parentId"),
            noPause=bool(data.get("noPause")),
        )
    return out


def _generic_state(row: dict[str, Any]) -> str:
    """0.37's ``GenericTaskState`` of a task row."""
    state, data = row["state"], row["data"] or {}
    if state == _task_rows.PAUSED:
        name = "PAUSED"
    elif state == "RUNNING" and data.get("pause_requested"):
        name = "STOPPING_PAUSED"
    elif state == "RUNNING" and row["kill_requested"]:
        name = "STOPPING_CANCELED"
    elif state in _task_rows.LIVE:
        name = "ACTIVE"
    elif str(row["exit_status"] or "").startswith("killed") or row["kill_requested"]:
        # A kill that came while it ran: CANCELED, as 0.37, even when it ended by itself first.
        name = "CANCELED"
    elif row["exit_status"] == "exited with code 0":
        name = "COMPLETED"
    else:
        name = "ERROR"
    return f"GENERIC_TASK_STATE_{name}"


def _v1_trial_allocation(task_id: str, row: Any) -> dict[str, Any]:
    live = row["end_time"] is None
    return {
        "allocationId": row["id"],
        "taskId": task_id,
        "state": "STATE_RUNNING" if live else "STATE_TERMINATED",
        "slots": sum(int(r.get("slots") or 0) for r in row["resources"] or []),
        "isReady": bool(row["ready"]) and live,
        "startTime": rfc3339(row["start_time"]),
        "endTime": rfc3339(row["end_time"]),
        "exitReason": None if row["exit_code"] is None else f"exit code {row['exit_code']}",
    }


@router.get("/tasks/{task_id}/config")
def get_generic_task_config(task_id: str, caller: Caller, store: StoreDep) -> dict[str, Any]:
    """``GetGenericTaskConfig``: the task's config as a JSON string (0.37's wire)."""
    caller.require_user()
    with store.read() as conn:
        row = _task_rows.get(conn, task_id)
    if row is None:
        raise NotFound(f"task {task_id!r} not found")
    given = (row["data"] or {}).get("givenConfig")
    shown = given if given is not None else row["config"] or {}
    return {"config": json.dumps(_redact.shown(shown, caller.owns(row["owner_id"])))}


@router.post("/tasks/{task_id}/kill")
def kill_task(
    task_id: str, request: Request, caller: Caller, store: StoreDep, body: Any = Body(None)
) -> dict[str, Any]:
    """0.37's ``KillGenericTask`` (any non-trial task here), with its children;
    ``killFromRoot``: the whole tree from its first ancestor."""
    from_root = isinstance(body, dict) and bool(body.get("killFromRoot"))
    with store.tx() as conn:
        row = _task_rows.get(conn, task_id)
        if row is None:
            raise NotFound(f"task {task_id!r} not found (trials are killed with det trial kill)")
        _check_owner(caller, row, "kill")
        top = _task_rows.root_of(conn, task_id) if from_root else task_id
        nodes = _task_rows.subtree(conn, top)
        _check_tree_owner(caller, nodes, "kill")
        for node in nodes:
            _task_rows.request_kill(conn, str(node["id"]))
    wake(request)
    return {}


@router.post("/tasks/{task_id}/pause")
def pause_generic_task(
    task_id: str, request: Request, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    """``PauseGenericTask``: stop the task's run and keep it PAUSED, with its children that
    were created with ``noPause`` false (0.37: a child pauses only when asked to)."""
    with store.tx() as conn:
        row = _generic_task(conn, task_id)
        _check_owner(caller, row, "pause")
        if row["state"] not in _task_rows.LIVE:
            raise FailedPrecondition(f"cannot pause task {task_id}: it is {row['state']}")
        if (row["data"] or {}).get("noPause"):
            raise FailedPrecondition(f"cannot pause task {task_id}: it was created with noPause")
        nodes = [
            node
            for node in _task_rows.subtree(conn, task_id)
            if node["state"] in _task_rows.LIVE
            and (str(node["id"]) == task_id or not (node["data"] or {}).get("noPause", True))
        ]
        _check_tree_owner(caller, nodes, "pause")
        for node in nodes:
            _task_rows.request_pause(conn, str(node["id"]))
    wake(request)
    return {}


@router.post("/tasks/{task_id}/unpause")
def unpause_generic_task(
    task_id: str, request: Request, caller: Caller, store: StoreDep
) -> dict[str, Any]:
    """``UnpauseGenericTask``: the task and its paused children run again (new allocations)."""
    with store.tx() as conn:
        row = _generic_task(conn, task_id)
        _check_owner(caller, row, "unpause")
        if row["state"] != _task_rows.PAUSED:
            raise FailedPrecondition(f"cannot unpause task {task_id}: it is not paused")
        nodes = [n for n in _task_rows.subtree(conn, task_id) if n["state"] == _task_rows.PAUSED]
        _check_tree_owner(caller, nodes, "unpause")
        for node in nodes:
            _task_rows.unpause(conn, str(node["id"]))
    wake(request)
    return {}


@router.post("/cleanup_logs")
def cleanup_logs(request: Request, caller: Caller) -> dict[str, Any]:
    """``CleanupLogs`` (admins): drop the task logs past their retention now."""
    caller.require_admin("clean up task logs")
    return {"removedCount": str(services(request).log_retention.sweep())}
