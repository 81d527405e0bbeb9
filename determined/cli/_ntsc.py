"""``det cmd``, ``det notebook``, ``det shell`` and ``det tensorboard`` (as tasks on the
master), as 0.37's: ``run``/``start``, ``list``, ``logs``, ``open``, ``kill``, ``config``,
``set priority``, ``det cmd describe`` and ``det shell show-ssh-command`` (docs/tasks.md)."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile
import time
import webbrowser
from typing import Any

import yaml

from determined import errors
from determined.cli import _context, _logs, _render, _session, _task_ids, _workspace
from determined.common import _paths
from determined.common.api import _routes

# command name -> (route noun, what it is called)
KINDS: dict[str, tuple[_routes.TaskNoun, str]] = {
    "command": ("commands", "command"),
    "notebook": ("notebooks", "notebook"),
    "shell": ("shells", "shell"),
    "tensorboard": ("tensorboards", "TensorBoard"),
}
# 0.37's columns: the v1 fields, in its order (TensorBoards add their experiments and trials).
COLUMNS = ["id", "username", "description", "state", "exitStatus", "resourcePool"]
TENSORBOARD_COLUMNS = [*COLUMNS[:4], "experimentIds", "trialIds", *COLUMNS[4:]]
SORT_KEYS = [*COLUMNS, "workspaceName", "startTime"]


def bearer(sess: Any) -> str:
    header = str(sess._http.headers.get("Authorization") or "")
    return header.removeprefix("Bearer ").strip()


def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    for key in keys[:-1]:
        config = config.setdefault(key, {})
    config[keys[-1]] = value


def build_config(args: argparse.Namespace) -> dict[str, Any]:
    """``--config-file`` laid under ``--config KEY=VALUE`` overrides (YAML values), as 0.37."""
    config: dict[str, Any] = {}
    if getattr(args, "config_file", None):
        loaded = yaml.safe_load(pathlib.Path(args.config_file).read_text()) or {}
        if not isinstance(loaded, dict):
            raise _render.CliError(f"{args.config_file}: the config must be a YAML mapping")
        config = loaded
    for item in getattr(args, "config", None) or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise _render.CliError(f"--config {item!r}: write KEY=VALUE, e.g. resources.slots=0")
        _set(config, key, yaml.safe_load(value))
    entry = getattr(args, "entrypoint", None)
    if entry:
        config["entrypoint"] = list(entry)
    for volume in getattr(args, "volume", None) or []:
        host, sep, container = volume.partition(":")
        if not sep or not host or not container:
            raise _render.CliError(f"--volume {volume!r}: write HOST_PATH:CONTAINER_PATH")
        mount = {"host_path": host, "container_path": container}
        config["bind_mounts"] = [*(config.get("bind_mounts") or []), mount]
    return config


def _workspace_id(args: argparse.Namespace) -> int | None:
    name = getattr(args, "workspace_name", None)
    if name is None:
        return None
    return int(_workspace.workspace_by_name(_session.session(args), name)["id"])


def _launch(
    args: argparse.Namespace, kind: str, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    sess = _session.session(args)
    noun = KINDS[kind][0]
    body: dict[str, Any] = {"config": build_config(args), **(extra or {})}
    context = getattr(args, "context", None)
    includes = getattr(args, "include", None) or []
    if context is not None and not pathlib.Path(context).is_dir():
        raise _render.CliError(
            f"-c/--context {str(context)!r} is not a directory: -c names the context directory "
            "to upload. For a command's own -c, put the command after -- (det cmd run -- python "
            "-c 'print(1)') or quote it as one argument"
        )
    if context is not None or includes:
        body["files"] = _context.read_context(context, includes)
    if getattr(args, "template", None):
        body["templateName"] = args.template
    workspace_id = _workspace_id(args)
    if workspace_id is not None:
        body["workspaceId"] = workspace_id
    return _routes.launch_ntsc(sess, noun, body)


def follow_logs(args: argparse.Namespace, task_id: str) -> None:
    sess = _session.session(args)
    resp = _routes.follow_task_logs(sess, task_id)
    for raw in resp.iter_lines():
        if raw:
            line = json.loads(raw)["result"]
            sys.stdout.write(str(line.get("log") or ""))
            sys.stdout.flush()


def cmd_run(args: argparse.Namespace) -> None:
    task = _launch(args, "command")
    if args.detach:
        print(task["id"])
        return
    print(f"Launched command (id: {task['id']}).", flush=True)
    try:
        wait_for_slots(args, "command", task["id"])
        follow_logs(args, task["id"])
    finally:
        print(f"Task log stream ended. To reopen log stream, run: det task logs -f {task['id']}")


def _service_url(args: argparse.Namespace, task: dict[str, Any]) -> str:
    return _session.master_url(args).rstrip("/") + str(task.get("serviceAddress") or "")


def cmd_start_notebook(args: argparse.Namespace) -> None:
    if args.preview:
        body = {"config": build_config(args), "preview": True}
        if args.template:
            body["templateName"] = args.template
        config = _routes.preview_notebook(_session.session(args), body)
        print(yaml.safe_dump(config, sort_keys=True), end="")
        return
    task = _launch(args, "notebook")
    if args.detach:
        print(task["id"])
        return
    print(f"Launched notebook (id: {task['id']}).", flush=True)
    _serve(args, "notebook", task, browser=not args.no_browser)


def cmd_start_tensorboard(args: argparse.Namespace) -> None:
    extra = {"experimentIds": args.experiment_ids or [], "trialIds": args.trial_ids or []}
    task = _launch(args, "tensorboard", extra)
    if args.detach:
        print(task["id"])
        return
    print(f"Launched TensorBoard (id: {task['id']}).", flush=True)
    _serve(args, "tensorboard", task, browser=not args.no_browser)


def _serve(args: argparse.Namespace, kind: str, task: dict[str, Any], *, browser: bool) -> None:
    """Wait for the task's slots and for its web service to answer through the master's
    proxy, then print its URL (and open a browser unless ``browser`` is false)."""
    wait_for_slots(args, kind, task["id"])
    _wait_answering(args, kind, task)
    _open_url(_service_url(args, task), browser=browser)


def _wait_answering(
    args: argparse.Namespace, kind: str, task: dict[str, Any], timeout: float = 180
) -> None:
    """Poll the service through the master's proxy until it answers (JupyterLab takes a few
    seconds to start); a task that ends first is an error that names its logs."""
    sess = _session.session(args)
    name = KINDS[kind][1]
    deadline = time.monotonic() + timeout
    said = False
    while time.monotonic() < deadline:
        try:
            sess.get(str(task.get("serviceAddress") or ""), timeout=5)
            return
        except errors.MasterError:
            pass
        if _get(args, kind, task["id"])["state"] == "STATE_TERMINATED":
            raise _render.CliError(
                f"{name} {task['id']} ended before it served; see `det {_COMMAND[kind]} logs "
                f"{str(task['id'])[:8]}`"
            )
        if not said:
            print(f"Waiting for the {name} to answer...", flush=True)
            said = True
        time.sleep(0.5)
    raise _render.CliError(
        f"{name} {task['id']} did not answer within {timeout:.0f} s; see "
        f"`det {_COMMAND[kind]} logs {str(task['id'])[:8]}`"
    )


# det's kind names -> the det command that manages them
_COMMAND = {
    "command": "cmd",
    "notebook": "notebook",
    "shell": "shell",
    "tensorboard": "tensorboard",
}


def wait_for_slots(args: argparse.Namespace, kind: str, task_id: str) -> dict[str, Any]:
    """Poll the task until it leaves the queue; while it waits, print what it waits for
    whenever that changes: ``Waiting for N slots (M of T in use by ...); position P in the
    queue``. The task as it is then (running or ended)."""
    sess = _session.session(args)
    last = ""
    while True:
        task = _get(args, kind, task_id)
        if task["state"] != "STATE_QUEUED":
            return task
        line = queue_line(sess, task_id)
        if line and line != last:
            print(line, flush=True)
            last = line
        time.sleep(0.5)


def queue_line(sess: Any, job_id: str) -> str:
    """``Waiting for N slots (M of T in use by experiment 3, command 42b67709); position P in
    the queue`` for a queued job (``det job list``'s), or "" when it is not queued or its
    slots are free (it is about to start)."""
    jobs = _routes.list_job_queue(sess)
    queued = [j for j in jobs if (j.get("summary") or {}).get("state") == "STATE_QUEUED"]
    mine = next((j for j in queued if str(j.get("jobId")) == job_id), None)
    if mine is None:
        return ""
    pools = _routes.list_resource_pools(sess)
    total = sum(int(p.get("slotsAvailable") or 0) for p in pools)
    users = [j for j in jobs if int(j.get("allocatedSlots") or 0) > 0]
    in_use = sum(int(j["allocatedSlots"]) for j in users)
    need = int(mine.get("requestedSlots") or 0)
    if total - in_use >= need:
        return ""  # its slots are free: the scheduler starts it at its next look
    holders = ", ".join(_job_name(j) for j in users) or "nothing"
    position = queued.index(mine) + 1
    return (
        f"Waiting for {need} slot{'s' if need != 1 else ''} ({in_use} of {total} in use by "
        f"{holders}); position {position} of {len(queued)} in the queue (det job list)"
    )


def _job_name(job: dict[str, Any]) -> str:
    kind = str(job.get("type") or "").removeprefix("TYPE_").lower()
    entity = str(job.get("entityId") or job.get("jobId") or "")
    if kind == "experiment":
        return f"experiment {entity}"
    return f"{kind or 'task'} {entity[:8]}"


def _open_url(url: str, *, browser: bool = True) -> None:
    print(f"Open it at {url} (log in to the master's web UI first: the proxy asks for it)")
    if browser and os.environ.get("DET_NO_BROWSER") is None:
        webbrowser.open(url)


def _get(args: argparse.Namespace, kind: str, task_id: str) -> dict[str, Any]:
    return _routes.get_ntsc(_session.session(args), KINDS[kind][0], task_id)


def cmd_open(args: argparse.Namespace) -> None:
    task = _get(args, args.kind, args.task_id)
    _open_url(_service_url(args, task))


def cmd_list(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    users = None if args.all else str(_session.current_user(sess)["username"])
    items = _routes.list_ntsc(
        sess, KINDS[args.kind][0], users=users, workspace_id=_workspace_id(args)
    )
    if args.quiet:
        for item in items:
            print(item["id"])
        return
    names = _workspace.workspace_names(sess)
    for item in items:
        item["state"] = str(item["state"]).removeprefix("STATE_")
        item["workspaceName"] = names.get(int(item.get("workspaceId") or 1), "")
    items.sort(key=lambda t: _sortable(t.get(args.sort_by)), reverse=args.order_by == "desc")
    if args.json:
        _render.print_json(items)
        return
    columns = [*(TENSORBOARD_COLUMNS if args.kind == "tensorboard" else COLUMNS), "workspaceName"]
    rows = [[_cell(t.get(c)) for c in columns] for t in items]
    _render.table(columns, rows, as_csv=args.csv)


def _sortable(value: Any) -> tuple[bool, str]:
    # Missing values last; the rest as text (ids are UUIDs, times RFC 3339).
    return (value is None, "" if value is None else str(value))


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def cmd_describe(args: argparse.Namespace) -> None:
    """``det cmd describe ID``: the command's row of ``det cmd list`` (or its JSON)."""
    sess = _session.session(args)
    item = _get(args, args.kind, args.task_id)
    item["state"] = str(item["state"]).removeprefix("STATE_")
    item["workspaceName"] = _workspace.workspace_names(sess).get(
        int(item.get("workspaceId") or 1), ""
    )
    if args.json:
        _render.print_json(item)
        return
    columns = [*COLUMNS, "workspaceName"]
    _render.table(columns, [[_cell(item.get(c)) for c in columns]], as_csv=args.csv)


def cmd_config(args: argparse.Namespace) -> None:
    """``det cmd|notebook|shell|tensorboard config ID``: the task's config, as YAML."""
    body = _routes.get_ntsc_response(_session.session(args), KINDS[args.kind][0], args.task_id)
    print(yaml.safe_dump(body.get("config") or {}, sort_keys=True), end="")


def cmd_set_priority(args: argparse.Namespace) -> None:
    noun, name = KINDS[args.kind]
    _routes.set_ntsc_priority(_session.session(args), noun, args.task_id, args.priority)
    print(f"Set priority of {name} {args.task_id} to {args.priority}")


def cmd_kill(args: argparse.Namespace) -> None:
    """Kill each task in turn; the first failure stops the rest unless ``--force``."""
    sess = _session.session(args)
    noun, name = KINDS[args.kind]
    for i, task_id in enumerate(args.task_ids):
        try:
            _routes.kill_ntsc(sess, noun, task_id)
        except Exception as e:
            if not args.force:
                for skipped in args.task_ids[i + 1 :]:
                    print(f"Cowardly not killing {skipped}")
                raise
            print(f"Skipping: {e} ({type(e).__name__})")
            continue
        print(f"Killed {name} {task_id}")


def cmd_logs(args: argparse.Namespace) -> None:
    """``det task logs`` (and ``det cmd|notebook|shell logs``): pages of the task's lines,
    then new ones while the task runs (``-f``)."""
    sess = _session.session(args)
    after = 0
    seen = 0
    buffer: list[dict[str, Any]] = []

    def emit(entry: dict[str, Any]) -> None:
        _logs.print_logs(iter([entry]), as_json=args.json)

    while True:
        summaries = _routes.list_allocations(sess)
        live = any(t.get("taskId") == args.task_id for t in summaries.values())
        params = {"searchAfter": after, **_logs.filters_of(args)}
        page = _routes.get_task_logs(sess, args.task_id, params)
        entries = page.get("logs") or []
        for entry in entries:
            after = max(after, int(entry.get("id") or 0))
            if args.head is not None and seen >= args.head:
                break
            seen += 1
            if args.tail is None:
                emit(entry)
            else:
                buffer = (buffer + [entry])[-args.tail :] if args.tail else []
        if entries and (args.head is None or seen < args.head):
            continue
        if not args.follow or not live:
            break
        time.sleep(0.5)
    for entry in buffer:
        emit(entry)


def cmd_start_shell(args: argparse.Namespace) -> None:
    extra = {}
    if args.passphrase:
        extra["data"] = {"passphrase": getpass.getpass("Enter new passphrase: ")}
    task = _launch(args, "shell", extra)
    if args.detach:
        print(task["id"])
        return
    print(f"Launched shell (id: {task['id']}).", flush=True)
    wait_for_slots(args, "shell", task["id"])
    _wait_running(args, "shell", task["id"])
    sys.exit(open_shell(args, task["id"], args.ssh_opts, show=args.show_ssh_command))


def _wait_running(args: argparse.Namespace, kind: str, task_id: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _get(args, kind, task_id)["state"]
        if state == "STATE_RUNNING":
            return
        if state == "STATE_TERMINATED":
            raise _render.CliError(f"{kind} {task_id} ended before it ran; det task logs {task_id}")
        time.sleep(0.5)
    raise _render.CliError(f"{kind} {task_id} is not running after {timeout:.0f} s")


def ssh_command(master: str, task: dict[str, Any], key_file: str, extra: list[str]) -> list[str]:
    """The ``ssh`` argv reaching the shell's sshd through the master's proxy (a websocket,
    ``det``'s tunnel as ProxyCommand), authenticated with the shell's own key."""
    proxy = shlex.join([sys.executable, "-m", "determined.cli._tunnel", master, task["id"]])
    user = str((task.get("agentUserGroup") or {}).get("user") or getpass.getuser())
    return [
        "ssh",
        "-o",
        f"ProxyCommand={proxy}",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "LogLevel=ERROR",
        "-i",
        key_file,
        "-l",
        user,
        str(task["id"]),
        *extra,
    ]


def open_shell(
    args: argparse.Namespace,
    task_id: str,
    extra: list[str],
    *,
    show: bool = False,
    print_only: bool = False,
) -> int:
    """ssh into the shell; ``show``: print the ssh command first, with the key kept in
    ``<data dir>/shell/<id>/key`` so that the command works later (an IDE's remote SSH);
    ``print_only``: print it and return."""
    sess = _session.session(args)
    task = _get(args, "shell", task_id)
    env = {**os.environ, "DET_TUNNEL_TOKEN": bearer(sess)}
    master = _session.master_url(args)
    if show:
        kept = _paths.data_dir() / "shell" / str(task["id"])
        kept.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = kept / "key"
        key.touch(mode=0o600, exist_ok=True)
        key.write_text(str(task["privateKey"]))
        cmd = ssh_command(master, task, str(key), extra)
        print(shlex.join(cmd), flush=True)
        return 0 if print_only else subprocess.run(cmd, env=env).returncode
    with tempfile.TemporaryDirectory(prefix="det-shell-") as tmp:
        key = pathlib.Path(tmp) / "key"
        key.write_text(str(task["privateKey"]))
        key.chmod(0o600)
        return subprocess.run(ssh_command(master, task, str(key), extra), env=env).returncode


def cmd_open_shell(args: argparse.Namespace) -> None:
    sys.exit(open_shell(args, args.task_id, args.ssh_opts, show=args.show_ssh_command))


def cmd_show_ssh_command(args: argparse.Namespace) -> None:
    wait_for_slots(args, "shell", args.task_id)
    _wait_running(args, "shell", args.task_id)
    open_shell(args, args.task_id, args.ssh_opts, show=True, print_only=True)


def _common_launch(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config-file", default=None, help="a YAML task config")
    p.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="a config override"
    )
    p.add_argument("--template", default=None, help="a config template to lay the config over")
    p.add_argument("-d", "--detach", action="store_true", help="print the ID and return")
    p.add_argument(
        "-v",
        "--volume",
        action="append",
        default=[],
        metavar="HOST:CONTAINER",
        help="a bind mount (config's bind_mounts; tasks run on the host here, so it is recorded "
        "in the config for 0.37's sake and changes nothing)",
    )
    add_context_args(p)
    workspace_arg(p, "to launch in (default: Uncategorized)")


def add_context_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-c", "--context", type=pathlib.Path, default=None, help="a context directory to upload"
    )
    p.add_argument(
        "-i",
        "--include",
        type=pathlib.Path,
        action="append",
        default=[],
        help="a file or dir to add",
    )


def workspace_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("-w", "--workspace-name", default=None, help=f"the workspace {what}")


def common_manage(cmds: argparse._SubParsersAction, kind: str, what: str) -> None:
    ls = cmds.add_parser("list", aliases=["ls"], help=f"list {what}s")
    ls.add_argument("-q", "--quiet", action="store_true", help="only the IDs")
    ls.add_argument("-a", "--all", action="store_true", help="every user's")
    ls.add_argument("--sort-by", choices=SORT_KEYS, default="startTime", help="sort by this field")
    ls.add_argument("--order-by", choices=["asc", "desc"], default="asc", help="sort order")
    workspace_arg(ls, f"of the {what}s (default: every workspace)")
    fmt = ls.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="print as CSV")
    fmt.add_argument("--json", action="store_true", help="print as JSON")
    ls.set_defaults(func=cmd_list, kind=kind)
    kill = cmds.add_parser("kill", help=f"kill {what}s")
    kill.add_argument("task_ids", type=_task_ids.TaskRef, nargs="+", metavar="ID")
    kill.add_argument("-f", "--force", action="store_true", help="go on after a failed kill")
    kill.set_defaults(func=cmd_kill, kind=kind)
    logs = cmds.add_parser("logs", help=f"a {what}'s logs")
    logs.add_argument("task_id", type=_task_ids.TaskRef, metavar="ID")
    _logs.add_log_args(logs, allocations=True)
    logs.set_defaults(func=cmd_logs, kind=kind)
    config = cmds.add_parser("config", help=f"print a {what}'s config")
    config.add_argument("task_id", type=_task_ids.TaskRef, metavar="ID")
    config.set_defaults(func=cmd_config, kind=kind)
    setter = cmds.add_parser("set", help=f"set {what} attributes")
    attrs = setter.add_subparsers(dest="attribute", metavar="ATTRIBUTE", required=True)
    priority = attrs.add_parser("priority", help=f"set a {what}'s priority (1 to 99, 1 first)")
    priority.add_argument("task_id", type=_task_ids.TaskRef, metavar="ID")
    priority.add_argument("priority", type=int)
    priority.set_defaults(func=cmd_set_priority, kind=kind)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("command", aliases=["cmd"], help="run commands on the cluster")
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    run = cmds.add_parser("run", help="run a command (its logs follow unless -d)")
    _common_launch(run)
    run.add_argument("entrypoint", nargs="*", help="the command and its arguments")
    run.set_defaults(func=cmd_run)
    common_manage(cmds, "command", "command")
    describe = cmds.add_parser("describe", help="a command's row of det cmd list")
    describe.add_argument("task_id", type=_task_ids.TaskRef, metavar="ID")
    fmt = describe.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="print as CSV")
    fmt.add_argument("--json", action="store_true", help="print as JSON")
    describe.set_defaults(func=cmd_describe, kind="command")

    p = sub.add_parser("notebook", help="JupyterLab notebooks on the cluster")
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    start = cmds.add_parser("start", help="start JupyterLab (needs the [notebook] extra)")
    _common_launch(start)
    start.add_argument("--no-browser", action="store_true", help="do not open a browser")
    start.add_argument(
        "--preview", action="store_true", help="print the config it would run with; start nothing"
    )
    start.set_defaults(func=cmd_start_notebook)
    op = cmds.add_parser("open", help="open a notebook in the browser")
    op.add_argument("task_id", type=_task_ids.TaskRef, metavar="ID")
    op.set_defaults(func=cmd_open, kind="notebook")
    common_manage(cmds, "notebook", "notebook")

    p = sub.add_parser("shell", help="SSH shells on the cluster")
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    start = cmds.add_parser("start", help="start a shell and open it (unless -d)")
    _common_launch(start)
    start.add_argument("ssh_opts", nargs="*", help="ssh options (after --)")
    start.add_argument(
        "-p", "--passphrase", action="store_true", help="encrypt the shell's key (asks for one)"
    )
    _show_flag(start)
    start.set_defaults(func=cmd_start_shell)
    op = cmds.add_parser("open", help="open a shell with ssh (through the master)")
    op.add_argument("task_id", type=_task_ids.TaskRef, metavar="ID")
    op.add_argument("ssh_opts", nargs="*", help="ssh options and a command (after --)")
    _show_flag(op)
    op.set_defaults(func=cmd_open_shell, kind="shell")
    show = cmds.add_parser(
        "show-ssh-command",
        aliases=["show_ssh_command"],
        help="print the ssh command that opens the shell (e.g. for an IDE's remote SSH)",
    )
    show.add_argument("task_id", type=_task_ids.TaskRef, metavar="ID")
    show.add_argument("ssh_opts", nargs="*", help="ssh options (after --)")
    show.set_defaults(func=cmd_show_ssh_command, kind="shell")
    common_manage(cmds, "shell", "shell")


def _show_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--show-ssh-command",
        action="store_true",
        help="print the ssh command first (the shell's key is kept for it)",
    )
