"""``det experiment create CONFIG [DIR]``: post a YAML config and a model directory.

Without ``-m``/``$DET_MASTER`` and with no master answering, it starts the local master
(``det master up``) first and says so. ``--follow`` waits for the first trial and prints its logs
with the experiment's state and progress on stderr whenever they change.
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import yaml

from determined.cli import _context, _daemon, _logs, _project, _render, _session, _test_mode
from determined.common.api import Session, _routes


def _parse_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_overrides(config: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``--config a.b=v``: YAML-typed values, ``x,y`` as lists, ``[..]``/``{..}`` as YAML.

    Raises:
        CliError: an override without ``=``, or one whose parent key is not a mapping.
    """
    for item in overrides:
        if "=" not in item:
            raise _render.CliError(
                f"--config {item!r} is not of the form key=value (e.g. "
                "--config searcher.max_trials=4 or --config resources.slots_per_trial=2)"
            )
        key, raw = item.split("=", 1)
        if raw.startswith(("[", "{")):
            value = _parse_value(raw)
            if key == "bind_mounts" and isinstance(value, dict):
                value = [value]
        elif "," in raw:
            value = [_parse_value(v) for v in raw.split(",")]
        else:
            value = _parse_value(raw)
            if key == "bind_mounts":
                value = [value]
        node = config
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise _render.CliError(f"--config {key}: {part!r} is not a mapping in the config")
            node = child
        old = node.get(parts[-1])
        if isinstance(old, dict) and isinstance(value, dict):
            old.update(value)
        else:
            node[parts[-1]] = value
    return config


def _read_config(path: pathlib.Path, overrides: list[str]) -> str:
    try:
        text = path.read_text()
    except OSError as e:
        raise _render.CliError(f"cannot read experiment config {str(path)!r}: {e}") from e
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise _render.CliError(f"experiment config {str(path)!r} is not valid YAML: {e}") from e
    if not isinstance(config, dict):
        raise _render.CliError(f"experiment config {str(path)!r} must be a YAML mapping")
    if not overrides:
        return text  # keep the user's comments and order, as the reference does
    return str(yaml.safe_dump(apply_overrides(config, overrides), sort_keys=False))


def _ensure_master(args: argparse.Namespace) -> None:
    """Start the local master when nothing names one and none answers."""
    if _session.explicit_master(args) or _daemon.running() is not None:
        return
    if _daemon.answers(_session.DEFAULT_MASTER):
        return
    print("No master is running; starting a local one (stop it with `det master down`)...")
    port = _daemon.pick_port(_daemon.DEFAULT_PORT)
    if port != _daemon.DEFAULT_PORT:
        print(
            f"Port {_daemon.DEFAULT_PORT} is in use by another program, so the master takes "
            f"port {port} (choose one with `det master up --port N`; other det commands find "
            "it by themselves)"
        )
    local = _daemon.start(port)
    print(f"Started a local master at {local.url} (data dir {local.data_dir})")


def follow_first_trial(sess: Session, experiment_id: int, progress_sess: Session) -> None:
    """Print the first trial's logs until it ends; ``progress_sess`` (a second session: the
    display thread must not share one with the log reader) polls the experiment."""
    print("Waiting for first trial to begin...", flush=True)
    progress = _logs.Watcher(progress_sess, experiment_id=experiment_id)
    trial_id = _logs.wait_for_first_trial(sess, experiment_id, tick=progress.poll)
    print(f"Following first trial with ID {trial_id}", flush=True)
    progress.trial_id = trial_id
    progress.start()
    causes = _logs.CauseFinder()
    try:
        _logs.print_logs(causes.watch(_logs.trial_logs(sess, trial_id, follow=True)))
    finally:
        progress.stop()
        print(
            f"Trial log stream ended. To reopen log stream, run: det trial logs -f {trial_id}",
            flush=True,
        )
    _logs.report_failure(sess, trial_id, causes.cause)


def _project_id(sess: Session, args: argparse.Namespace) -> int | None:
    """``--project_id``, or the id of ``--project`` in ``--workspace`` (default
    "Uncategorized"); None: the config's ``workspace``/``project``, else the default project."""
    if args.project is None:
        if args.workspace is not None:
            raise _render.CliError("--workspace needs --project (the project in that workspace)")
        return args.project_id
    if args.project_id is not None:
        raise _render.CliError("give --project_id or --project, not both")
    _, project = _project.project_by_name(sess, args.workspace or "Uncategorized", args.project)
    return int(project["id"])


def _local_test(args: argparse.Namespace, config_text: str) -> None:
    """``--local --test``: train the entrypoint's trial class for one batch in this process
    (no master), as 0.37 did for trial-class entrypoints."""
    import os

    from determined.exec._entrypoint import trial_class_from_entrypoint

    if not args.test_mode:
        raise _render.CliError(
            "--local runs only in test mode: add --test, or drop --local to train on the cluster"
        )
    config = yaml.safe_load(config_text)
    entrypoint = config.get("entrypoint")
    if not isinstance(entrypoint, str) or ":" not in entrypoint:
        raise _render.CliError(
            f"--local --test needs a module:Class entrypoint, not {entrypoint!r}; run a script "
            "entrypoint directly instead"
        )
    import logging

    import determined as det

    # The trial's log lines are the test's output, as 0.37 showed them.
    debug = bool(config.get("debug", False))
    logging.basicConfig(level=logging.DEBUG if debug else logging.INFO, format=det.LOG_FORMAT)
    model_dir = (args.model_def or pathlib.Path(".")).resolve()
    cwd = os.getcwd()
    os.chdir(model_dir)  # the trial reads its files relative to the model directory
    try:
        try:
            trial_class = trial_class_from_entrypoint(entrypoint, str(model_dir))
        except (ValueError, TypeError) as e:
            raise _render.CliError(str(e)) from e
        from determined import _execution

        _execution.test_one_batch(trial_class, config)
    finally:
        os.chdir(cwd)
    print("The test experiment passed.", flush=True)


def cmd_create(args: argparse.Namespace) -> None:
    config_text = _read_config(args.config_file, args.config)
    if args.local:
        _local_test(args, config_text)
        return
    files = _context.read_context(args.model_def, args.include)
    _ensure_master(args)
    sess = _session.session(args)
    body = {
        "activate": not args.paused,
        "config": config_text,
        "modelDefinition": files,
        "parentId": None,
        "projectId": _project_id(sess, args),
        "template": args.template,
        "validateOnly": False,
    }
    if args.test_mode:
        _test_mode.run(sess, body)
        return
    resp = _routes.create_experiment(sess, body)
    experiment_id = int(resp["experiment"]["id"])
    print(f"Created experiment {experiment_id}", flush=True)
    for warning in resp.get("warnings") or []:
        print(f"warning: {warning}", file=sys.stderr)
    if args.follow_first_trial and not args.paused:
        if args.publish:
            with _published_first_trial(args, sess, experiment_id):
                follow_first_trial(sess, experiment_id, _session.session(args))
        else:
            follow_first_trial(sess, experiment_id, _session.session(args))


@contextlib.contextmanager
def _published_first_trial(
    args: argparse.Namespace, sess: Session, experiment_id: int
) -> Iterator[None]:
    """``-p``: the first trial's ``proxy_ports`` on local ports while its logs are followed."""
    from determined.cli import _ntsc, _tunnel

    try:
        ports = _tunnel.parse_publish(args.publish)
    except ValueError as e:
        raise _render.CliError(str(e)) from e
    trial_id = _logs.wait_for_first_trial(sess, experiment_id)
    task_id = str(_routes.get_trial(sess, trial_id)["taskId"])
    services = {local: f"{task_id}:{remote}" for local, remote in ports.items()}
    master = _session.master_url(args)
    with _tunnel.published(master, _ntsc.bearer(sess), services):
        for local, remote in ports.items():
            print(f"Trial {trial_id}'s port {remote} is at 127.0.0.1:{local}", flush=True)
        yield


def add_parser(cmds: argparse._SubParsersAction) -> None:
    p = cmds.add_parser("create", help="create experiment")
    p.add_argument("config_file", type=pathlib.Path, help="experiment config file (.yaml)")
    p.add_argument(
        "model_def", nargs="?", type=pathlib.Path, default=None, help="model definition directory"
    )
    p.add_argument(
        "-i",
        "--include",
        action="append",
        default=[],
        type=pathlib.Path,
        help="another file or directory to send with the model definition (under its name)",
    )
    p.add_argument("--template", default=None, help="config template to lay under the config")
    p.add_argument("--config", action="append", default=[], help="override: key.path=value")
    p.add_argument("--project_id", type=int, default=None, help="project to place it in")
    p.add_argument("--project", default=None, help="name of the project to place it in")
    p.add_argument(
        "--workspace", default=None, help="workspace of --project (default: Uncategorized)"
    )
    p.add_argument(
        "-f",
        "--follow-first-trial",
        "--follow",
        dest="follow_first_trial",
        action="store_true",
        help="follow the logs of the first trial",
    )
    p.add_argument(
        "-p",
        "--publish",
        action="append",
        default=[],
        metavar="[LOCAL:]PORT",
        help="with --follow: serve the first trial's proxy port PORT (of environment.proxy_ports) "
        "on this machine's LOCAL port (default the same) while its logs are followed",
    )
    p.add_argument("--paused", action="store_true", help="do not activate the experiment")
    p.add_argument(
        "--local",
        action="store_true",
        help="with --test: run the test in this process, without a master (trial classes only)",
    )
    p.add_argument(
        "-t",
        "--test-mode",
        "--test",
        dest="test_mode",
        action="store_true",
        help="validate, then train one batch in a test experiment (no real experiment)",
    )
    p.set_defaults(func=cmd_create)
