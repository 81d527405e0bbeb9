"""``det cmd``, ``det notebook``, ``det shell`` and ``det tensorboard`` (as tasks on the
master), as 0.37's: ``run``/``start``, ``list``, ``logs``, ``open``, ``kill`` (docs/tasks.md)."""

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

from determined.cli import _context, _logs, _render, _session

# command name -> (route noun, JSON key of one, of the list, what it is called)
KINDS = {
    "command": ("commands", "command", "commands", "command"),
    "notebook": ("notebooks", "notebook", "notebooks", "notebook"),
    "shell": ("shells", "shell", "shells", "shell"),
    "tensorboard": ("tensorboards", "tensorboard", "tensorboards", "TensorBoard"),
}
HEADERS = ["ID", "Owner", "Description", "State", "Exit Status", "Resource Pool"]


def _bearer(sess: Any) -> str:
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
    return config


def _launch(
    args: argparse.Namespace, kind: str, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    sess = _session.session(args)
    noun, one, _, _ = KINDS[kind]
    body: dict[str, Any] = {"config": build_config(args), **(extra or {})}
    context = getattr(args, "context", None)
    includes = getattr(args, "include", None) or []
    if context is not None or includes:
        body["files"] = _context.read_context(context, includes)
    if getattr(args, "template", None):
        body["templateName"] = args.template
    return dict(sess.post(f"/api/v1/{noun}", json=body).json()[one])


def follow_logs(args: argparse.Namespace, task_id: str) -> None:
    sess = _session.session(args)
    resp = sess.get(
        f"/api/v1/tasks/{task_id}/logs", params={"follow": "true"}, stream=True, timeout=None
    )
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
        follow_logs(args, task["id"])
    finally:
        print(f"Task log stream ended. To reopen log stream, run: det task logs -f {task['id']}")


def _service_url(args: argparse.Namespace, task: dict[str, Any]) -> str:
    return _session.master_url(args).rstrip("/") + str(task.get("serviceAddress") or "")


def cmd_start_notebook(args: argparse.Namespace) -> None:
    task = _launch(args, "notebook")
    print(task["id"] if args.detach else f"Launched notebook (id: {task['id']}).")
    if not args.detach and not args.no_browser:
        _open_url(_service_url(args, task))


def cmd_start_tensorboard(args: argparse.Namespace) -> None:
    extra = {"experimentIds": args.experiment_ids or [], "trialIds": args.trial_ids or []}
    task = _launch(args, "tensorboard", extra)
    print(task["id"] if args.detach else f"Launched TensorBoard (id: {task['id']}).")
    if not args.detach and not args.no_browser:
        _open_url(_service_url(args, task))


def _open_url(url: str) -> None:
    print(f"Open it at {url} (log in to the master's web UI first: the proxy asks for it)")
    with_browser = os.environ.get("DET_NO_BROWSER") is None
    if with_browser:
        webbrowser.open(url)


def _get(args: argparse.Namespace, kind: str, task_id: str) -> dict[str, Any]:
    noun, one, _, _ = KINDS[kind]
    return dict(_session.session(args).get(f"/api/v1/{noun}/{task_id}").json()[one])


def cmd_open(args: argparse.Namespace) -> None:
    task = _get(args, args.kind, args.task_id)
    _open_url(_service_url(args, task))


def cmd_list(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    noun, _, many, _ = KINDS[args.kind]
    params = {} if args.all else {"users": _session.current_user(sess)["username"]}
    items = sess.get(f"/api/v1/{noun}", params=params).json()[many]
    if args.quiet:
        for item in items:
            print(item["id"])
        return
    if args.json:
        _render.print_json(items)
        return
    rows = [
        [
            t["id"],
            t["username"],
            t["description"],
            str(t["state"]).removeprefix("STATE_"),
            t.get("exitStatus") or "",
            t["resourcePool"],
        ]
        for t in items
    ]
    _render.table(HEADERS, rows, as_csv=args.csv)


def cmd_kill(args: argparse.Namespace) -> None:
    sess = _session.session(args)
    noun, _, _, name = KINDS[args.kind]
    for task_id in args.task_ids:
        sess.post(f"/api/v1/{noun}/{task_id}/kill")
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
        summaries = sess.get("/api/v1/tasks").json().get("allocationIdToSummary") or {}
        live = any(t.get("taskId") == args.task_id for t in summaries.values())
        params = {"searchAfter": after, **_logs.filters_of(args)}
        page = sess.get(f"/api/v1/tasks/{args.task_id}/logs", params=params).json()
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
    task = _launch(args, "shell")
    if args.detach:
        print(task["id"])
        return
    print(f"Launched shell (id: {task['id']}).", flush=True)
    _wait_running(args, "shell", task["id"])
    sys.exit(open_shell(args, task["id"], args.ssh_opts))


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


def open_shell(args: argparse.Namespace, task_id: str, extra: list[str]) -> int:
    sess = _session.session(args)
    task = _get(args, "shell", task_id)
    with tempfile.TemporaryDirectory(prefix="det-shell-") as tmp:
        key = pathlib.Path(tmp) / "key"
        key.write_text(str(task["privateKey"]))
        key.chmod(0o600)
        env = {**os.environ, "DET_TUNNEL_TOKEN": _bearer(sess)}
        cmd = ssh_command(_session.master_url(args), task, str(key), extra)
        return subprocess.run(cmd, env=env).returncode


def cmd_open_shell(args: argparse.Namespace) -> None:
    sys.exit(open_shell(args, args.task_id, args.ssh_opts))


def _common_launch(p: argparse.ArgumentParser, context: bool = True) -> None:
    p.add_argument("--config-file", default=None, help="a YAML task config")
    p.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="a config override"
    )
    p.add_argument("--template", default=None, help="a config template to lay the config over")
    p.add_argument("-d", "--detach", action="store_true", help="print the ID and return")
    if context:
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


def common_manage(cmds: argparse._SubParsersAction, kind: str, what: str) -> None:
    ls = cmds.add_parser("list", aliases=["ls"], help=f"list {what}s")
    ls.add_argument("-q", "--quiet", action="store_true", help="only the IDs")
    ls.add_argument("-a", "--all", action="store_true", help="every user's")
    fmt = ls.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="print as CSV")
    fmt.add_argument("--json", action="store_true", help="print as JSON")
    ls.set_defaults(func=cmd_list, kind=kind)
    kill = cmds.add_parser("kill", help=f"kill {what}s")
    kill.add_argument("task_ids", nargs="+", metavar="ID")
    kill.set_defaults(func=cmd_kill, kind=kind)
    if kind != "tensorboard":
        logs = cmds.add_parser("logs", help=f"a {what}'s logs")
        logs.add_argument("task_id", metavar="ID")
        _logs.add_log_args(logs)
        logs.set_defaults(func=cmd_logs, kind=kind)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("command", aliases=["cmd"], help="run commands on the cluster")
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    run = cmds.add_parser("run", help="run a command (its logs follow unless -d)")
    _common_launch(run)
    run.add_argument("entrypoint", nargs="*", help="the command and its arguments")
    run.set_defaults(func=cmd_run)
    common_manage(cmds, "command", "command")

    p = sub.add_parser("notebook", help="JupyterLab notebooks on the cluster")
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    start = cmds.add_parser("start", help="start JupyterLab (needs the [notebook] extra)")
    _common_launch(start)
    start.add_argument("--no-browser", action="store_true", help="do not open a browser")
    start.set_defaults(func=cmd_start_notebook)
    op = cmds.add_parser("open", help="open a notebook in the browser")
    op.add_argument("task_id", metavar="ID")
    op.set_defaults(func=cmd_open, kind="notebook")
    common_manage(cmds, "notebook", "notebook")

    p = sub.add_parser("shell", help="SSH shells on the cluster")
    cmds = p.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    start = cmds.add_parser("start", help="start a shell and open it (unless -d)")
    _common_launch(start)
    start.add_argument("ssh_opts", nargs="*", help="ssh options (after --)")
    start.set_defaults(func=cmd_start_shell)
    op = cmds.add_parser("open", help="open a shell with ssh (through the master)")
    op.add_argument("task_id", metavar="ID")
    op.add_argument("ssh_opts", nargs="*", help="ssh options and a command (after --)")
    op.set_defaults(func=cmd_open_shell)
    common_manage(cmds, "shell", "shell")
