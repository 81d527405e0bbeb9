"""One run of a trial as a local process group (docs/reference/master.md §2.3, §3.1).

The resource manager hands a :class:`LaunchSpec` (read from the store by :func:`launch_spec`)
to :func:`start`, which unpacks the model definition into a fresh work dir, links the bind
mounts, and starts the entrypoint in its own session with the ``DET_*`` environment. Its
stdout and stderr go line by line to a :class:`LogSink` (``_log_capture``).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa

from determined.common import expconf
from determined.master._errors import InvalidArgument
from determined.master.resources._log_capture import LogSink
from determined.master.store import AllocationRow, _checkpoints, _experiments, _trials

STARTUP_HOOK = "startup-hook.sh"


class LaunchError(Exception):
    """The run could not be started (bad model definition, bad bind mount, no such program)."""


def describe(error: Exception) -> str:
    """What went wrong at launch, for the trial's log: our own message, else the error's type
    and text (``ValueError: embedded null byte``)."""
    if isinstance(error, LaunchError):
        return str(error)
    return f"cannot start the trial: {type(error).__name__}: {error}"


@dataclasses.dataclass
class LaunchSpec:
    """Everything one run needs; built inside the transaction that allocated it."""

    allocation_id: str
    task_id: str
    trial_id: int
    experiment_id: int
    run_id: int
    token: str
    slot_ids: list[int]  # every slot of the run
    gpu: bool
    config: expconf.ExperimentConfig  # typed, as resolved at create (api/_resolve.py)
    hparams: dict[str, Any]
    seed: int
    latest_checkpoint: str | None
    steps_completed: int
    model_definition: bytes
    # The slots of each container (one process group each); one container unless the run
    # spans several (simulated) agents.
    containers: list[list[int]] = dataclasses.field(default_factory=list)
    port_offset: int = 0  # DET_UNIQUE_PORT_OFFSET: see pick_port_offset
    user: str = ""  # DET_USER and DET_USER_TOKEN: the owner's name and user token for the run
    user_token: str = ""

    def __post_init__(self) -> None:
        if not self.containers:
            self.containers = [list(self.slot_ids)]


def launch_spec(
    conn: sa.Connection,
    alloc: AllocationRow,
    token: str,
    containers: list[list[int]],
    gpu: bool,
) -> LaunchSpec:
    """Read what the run of ``alloc`` needs: the trial's newest COMPLETED checkpoint (else its
    warm start, with 0 steps) is its ``DET_LATEST_CHECKPOINT``."""
    trial = _trials.require_trial(conn, alloc["trial_id"])
    exp = _experiments.require_experiment(conn, trial["experiment_id"])
    latest = _checkpoints.latest_completed(conn, int(trial["id"]))
    uuid, steps = trial["warm_start_checkpoint"], 0
    if latest is not None:
        uuid, steps = latest["uuid"], int(latest["steps_completed"])
    return LaunchSpec(
        allocation_id=str(alloc["id"]),
        task_id=str(alloc["task_id"]),
        trial_id=int(trial["id"]),
        experiment_id=int(exp["id"]),
        run_id=int(alloc["run_id"]),
        token=token,
        slot_ids=[s for c in containers for s in c],
        gpu=gpu,
        # The stored JSON is a config this parser wrote: it parses back to the same config.
        config=expconf.parse_experiment_config(exp["config"]),
        hparams=dict(trial["hparams"]),
        seed=int(trial["seed"]),
        latest_checkpoint=uuid,
        steps_completed=steps,
        model_definition=exp["model_definition"] or b"",
        containers=containers,
    )


def command(python: str = sys.executable) -> list[str]:
    """The argv of every run: ``determined.exec.launch`` (run by ``python``, the experiment's
    environment's) checks the checkpoint storage and runs the experiment's entrypoint in any of
    its three forms (docs/launch.md)."""
    return [python, "-m", "determined.exec.launch"]


def check_bind_mounts(config: expconf.ExperimentConfig, sandboxed: bool) -> None:
    """Refuse bind mounts this master cannot honour: an absolute ``container_path`` other
    than its ``host_path`` needs the task sandbox (``sandboxed``), which mounts it there in
    the trial's view (``_sandbox.Sandbox.wrap``).

    Raises:
        InvalidArgument: such a mount on a master without the sandbox.
    """
    if sandboxed:
        return
    for mount in config.bind_mounts:
        host, target = mount.host_path, mount.container_path
        if os.path.isabs(target) and os.path.normpath(target) != os.path.normpath(host):
            raise InvalidArgument(
                f"bind_mounts: container_path {target!r} is absolute; this master runs trials "
                f"without the task sandbox (task_isolation), so nothing can mount {host!r} "
                f"there. Use a relative container_path (linked inside the trial's work dir), "
                f"set it to the host_path, or run the master with bubblewrap (docs/security.md)"
            )


def container_id(allocation_id: str, container: int) -> str:
    """The allocation id for its first container (the usual single one), ``<id>.<n>`` after."""
    return allocation_id if container == 0 else f"{allocation_id}.{container}"


# The fixed ports a run's processes bind: DistributedContext's two ZMQ ports and torchrun's
# multi-node rendezvous port, each plus the run's DET_UNIQUE_PORT_OFFSET. The ZMQ ports reach
# the run already offset, in the variables 0.37's master sets (unless the experiment's
# environment_variables choose them).
BASE_PORTS = (12360, 12376, 29400)
ZMQ_PORT_ENV = ("INTER_TRAIN_PROCESS_COMM_PORT_1", "INTER_TRAIN_PROCESS_COMM_PORT_2")
PORT_OFFSET_STEP = 32  # > 16, the gap between the two ZMQ ports: offsets never interleave


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def pick_port_offset(in_use: set[int]) -> int:
    """The smallest offset (a multiple of 32) that no live run holds and whose ports are free
    on this machine now, so that concurrent runs, and anything else listening here, never
    collide with a run's fixed ports."""
    for offset in range(0, 1000 * PORT_OFFSET_STEP, PORT_OFFSET_STEP):
        if offset not in in_use and all(_bindable(p + offset) for p in BASE_PORTS):
            return offset
    raise LaunchError("no free ports for the run's processes (12360+, 12376+, 29400+)")


def process_env(
    user_env: dict[str, str],
    work_dir: Path,
    *,
    gpu: bool,
    slot_ids: list[int],
    ids: dict[str, str],
    token: str,
) -> dict[str, str]:
    """What every process of a trial or task starts with: the master's own environment (no
    ``DET_*`` but ``DET_HOME``), the user's ``environment_variables``, the work dir on
    ``PYTHONPATH``, its GPUs, and the ``DET_*`` trials and tasks share. ``ids``: its
    ``DET_MASTER``, ``DET_CLUSTER_ID``, ``DET_TASK_ID``, ``DET_ALLOCATION_ID``,
    ``DET_CONTAINER_ID`` and ``DET_TASK_TYPE``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_") or k == "DET_HOME"}
    env.update(user_env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(work_dir), env.get("PYTHONPATH")] if p)
    if gpu:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in slot_ids)
    env.update(ids)
    env.update(
        DET_AGENT_ID="local",
        DET_SLOT_IDS=json.dumps(slot_ids),
        DET_RESOURCES_TYPE="local-process",
        DET_SESSION_TOKEN=token,
    )
    return env


def trial_env(
    spec: LaunchSpec, master_url: str, cluster_id: str, work_dir: Path, container: int = 0
) -> dict[str, str]:
    """The environment of one container of the run (:func:`process_env`, the experiment's
    ``environment_variables``), with the trial's ``DET_*`` of docs/reference/master.md §3.1.
    ``DET_RESOURCES_ID`` is the container's index, which it gives the rendezvous endpoint."""
    user_env = spec.config.environment.environment_variables.as_dict("cuda" if spec.gpu else "cpu")
    ids = {
        "DET_MASTER": master_url,
        "DET_CLUSTER_ID": cluster_id,
        "DET_TASK_ID": spec.task_id,
        "DET_ALLOCATION_ID": spec.allocation_id,
        "DET_CONTAINER_ID": container_id(spec.allocation_id, container),
        "DET_TASK_TYPE": "TRIAL",
    }
    env = process_env(
        user_env,
        work_dir,
        gpu=spec.gpu,
        slot_ids=spec.containers[container],
        ids=ids,
        token=spec.token,
    )
    if not user_env.keys() & set(ZMQ_PORT_ENV):
        # Every DistributedContext of the run, also one built directly, binds these.
        for name, base in zip(ZMQ_PORT_ENV, BASE_PORTS, strict=False):
            env[name] = str(base + spec.port_offset)
    # `python3` in an entrypoint is the master's interpreter, which has `determined`.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env.update(
        DET_RESOURCES_ID=str(container),
        DET_TRIAL_ID=str(spec.trial_id),
        DET_EXPERIMENT_ID=str(spec.experiment_id),
        DET_TRIAL_RUN_ID=str(spec.run_id),
        DET_TRIAL_SEED=str(spec.seed),
        DET_HPARAMS=json.dumps(spec.hparams),
        DET_EXPERIMENT_CONFIG=json.dumps(spec.config.to_json_dict()),
        DET_STEPS_COMPLETED=str(spec.steps_completed),
        DET_UNIQUE_PORT_OFFSET=str(spec.port_offset),
    )
    if spec.latest_checkpoint:
        env["DET_LATEST_CHECKPOINT"] = spec.latest_checkpoint
    if spec.user_token:
        env.update(DET_USER=spec.user, DET_USER_TOKEN=spec.user_token)
    return env


def prepare_work_dir(work_dir: Path, spec: LaunchSpec, sandboxed: bool) -> None:
    """Unpack the model definition into ``work_dir`` and link relative bind mounts there
    (``sandboxed``: absolute ones are the sandbox's, ``check_bind_mounts``).

    Raises:
        LaunchError: a bad archive or bind mount.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    if spec.model_definition:
        try:
            with tarfile.open(fileobj=io.BytesIO(spec.model_definition), mode="r:gz") as tar:
                tar.extractall(work_dir, filter="data")
        except (tarfile.TarError, OSError) as e:
            raise LaunchError(f"cannot unpack the model definition: {e}") from e
    try:
        check_bind_mounts(spec.config, sandboxed)
    except InvalidArgument as e:
        raise LaunchError(e.message) from e
    link_bind_mounts([(m.host_path, m.container_path) for m in spec.config.bind_mounts], work_dir)


def link_bind_mounts(mounts: list[tuple[str, str]], work_dir: Path) -> None:
    """Each ``(host_path, container_path)`` with a relative ``container_path`` as a link at that
    path inside ``work_dir`` (trials' and tasks' alike; an absolute one is where it is).

    Raises:
        LaunchError: a ``container_path`` that leads out of the work dir.
    """
    for host, target in mounts:
        if os.path.isabs(target):
            continue
        link = (work_dir / target).resolve()
        if work_dir.resolve() not in link.parents:
            raise LaunchError(f"bind_mounts: container_path {target!r} leaves the work dir")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(host, target_is_directory=True)


def with_startup_hook(argv: list[str], first: str = "") -> list[str]:
    """``argv`` after the work dir's ``startup-hook.sh`` when there is one, sourced (what it
    exports reaches the entrypoint) in the same process, so inside the same sandbox; ``first``:
    a shell command run before it the same way (the master config's
    ``task_container_defaults.startup_hook``, ``experiment.ContainerDefaults``)."""
    check = f"if [ -f ./{STARTUP_HOOK} ]; then . ./{STARTUP_HOOK} || exit $?; fi"
    if not first:
        return ["sh", "-c", f'{check}; exec "$@"', "sh", *argv]
    return ["sh", "-c", f'eval "$1" || exit $?; shift; {check}; exec "$@"', "sh", first, *argv]


class TrialProcess:
    """A started run: its process group and the threads copying its output to the sink.

    ``wrap`` turns the argv (its startup hook included) into the sandboxed one
    (``_sandbox.Sandbox.wrap``); the process gets the usual umask 022 back (the master's own
    is 077)."""

    def __init__(
        self,
        argv: list[str],
        work_dir: Path,
        env: dict[str, str],
        sink: LogSink,
        wrap: Callable[[list[str]], list[str]] | None = None,
        startup_hook: str = "",
    ):
        self.work_dir = work_dir
        if startup_hook or (work_dir / STARTUP_HOOK).exists():
            argv = with_startup_hook(argv, startup_hook)
        if wrap is not None:
            argv = wrap(argv)
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=work_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                umask=0o022,
            )
        except OSError as e:
            raise LaunchError(f"cannot start {argv[0]!r}: {e}") from e
        self.pid = self.proc.pid
        self._readers = [
            threading.Thread(target=_copy, args=(stream, sink, name), daemon=True)
            for stream, name in ((self.proc.stdout, "stdout"), (self.proc.stderr, "stderr"))
        ]
        for reader in self._readers:
            reader.start()

    def poll(self) -> int | None:
        return self.proc.poll()

    def signal_group(self, sig: int = signal.SIGKILL) -> None:
        """Signal every process of the run's session (the leader's pid is its group id)."""
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def finish(self, timeout: float = 5.0) -> None:
        """After the leader exited: kill what is left of the group, drain the output."""
        self.signal_group(signal.SIGKILL)
        for reader in self._readers:
            reader.join(timeout)


def _copy(stream: IO[bytes] | None, sink: LogSink, stdtype: str) -> None:
    if stream is None:
        return
    with stream:
        for raw in iter(stream.readline, b""):
            text = raw.decode("utf-8", errors="replace")
            for part in text.rstrip("\n").split("\r"):
                if part:
                    sink.line(part, stdtype=stdtype)
