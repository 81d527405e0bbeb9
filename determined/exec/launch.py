"""``python -m determined.exec.launch``: what a trial process runs first.

Checks that the trial can write to its checkpoint storage (a bad bucket or path fails here, in
seconds, not after the first hour of training), meets the other containers of its allocation at
the master's rendezvous endpoint (which gives every container the same address list, chief
first, and its own rank), then runs the experiment's ``entrypoint``:

* ``module:Class`` (the legacy form) -> ``python -m determined.launch.torch_distributed --
  --trial module:Class``;
* any other string -> ``sh -c STRING`` (``sh -c 'exec STRING'`` for one plain command);
* a list -> run as given.

Signals are forwarded, and the exit code is the entrypoint's.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import uuid

import determined as det
from determined import errors
from determined.common import expconf, storage
from determined.common.api import Session, _routes
from determined.launch import _signals

logger = logging.getLogger("determined.exec.launch")

LEGACY_ENTRYPOINT = re.compile(r"^[a-zA-Z0-9_.]+:[a-zA-Z0-9_]+$")
# One plain command (words of these characters, no variable assignment first): the shell can
# `exec` it, so signals reach the command itself instead of killing the shell in between (a
# batch scheduler signals every process of the job: the shell would exit 143 while the trial
# checkpoints and exits 0).
_PLAIN_COMMAND = re.compile(r"[\w./:,@%+=\- ]+")


def entrypoint_command(entrypoint: str | list[str]) -> list[str]:
    """The argv that runs an experiment's ``entrypoint``."""
    if isinstance(entrypoint, list):
        if not entrypoint or not all(isinstance(a, str) for a in entrypoint):
            raise ValueError(f"an entrypoint list must be non-empty strings, not {entrypoint!r}")
        return list(entrypoint)
    if not isinstance(entrypoint, str) or not entrypoint.strip():
        raise ValueError(f"the entrypoint must be a string or a list, not {entrypoint!r}")
    if LEGACY_ENTRYPOINT.match(entrypoint):
        launcher = [sys.executable, "-m", "determined.launch.torch_distributed"]
        return [*launcher, "--", "--trial", entrypoint]
    plain = _PLAIN_COMMAND.fullmatch(entrypoint.strip()) and "=" not in entrypoint.split()[0]
    return ["sh", "-c", f"exec {entrypoint.strip()}" if plain else entrypoint]


def validate_storage(config: expconf.ExperimentConfig) -> None:
    """Write, read back and delete a small checkpoint; raises what goes wrong."""
    manager = storage.build(config.checkpoint_storage.to_json_dict())
    storage_id = str(uuid.uuid4())
    with tempfile.TemporaryDirectory() as src:
        with open(f"{src}/VALIDATE.txt", "w") as f:
            f.write(storage_id)
        manager.upload(src, storage_id)
    try:
        with manager.restore_path(storage_id) as path, open(path / "VALIDATE.txt") as f:
            if f.read() != storage_id:
                raise OSError("checkpoint storage returned different bytes than were written")
    finally:
        manager.delete(storage_id)


def rendezvous(info: det.ClusterInfo, resources_id: str) -> dict[str, str]:
    """Wait at the rendezvous endpoint until every container of the allocation has arrived;
    the ``DET_CONTAINER_*`` variables that describe them, for the entrypoint's environment."""
    session = Session(info.master_url, info.session_token, timeout=3600)
    try:
        found = _routes.get_rendezvous_info(session, info.allocation_id, resources_id)
    finally:
        session.close()
    return {
        "DET_CONTAINER_ADDRS": json.dumps(found["addresses"]),
        "DET_CONTAINER_RANK": str(found["rank"]),
        "DET_CONTAINER_SLOT_COUNTS": json.dumps(found["slots"]),
    }


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    if info is None or info.task_type != "TRIAL":
        print("determined.exec.launch runs trials started by a master", file=sys.stderr)
        return 1
    try:
        config = info.trial._experiment_config()
    except errors.InvalidExperimentConfig as e:
        print(f"the trial's experiment config is not valid: {e}", file=sys.stderr)
        return 1
    try:
        validate_storage(config)
    except Exception as e:
        print(f"checkpoint storage is not usable: {e}", file=sys.stderr)
        return 1
    env = dict(os.environ)
    resources_id = os.environ.get("DET_RESOURCES_ID")
    # 0.37's first line of a trial's log (its e2e tests look for it), secrets masked.
    logger.info(
        f"New trial runner in (container {resources_id}) on agent {info.agent_id}: "
        + json.dumps(det.util.mask_config_dict(info.trial._config))
    )
    if resources_id is not None:
        env.update(rendezvous(info, resources_id))
    cmd = entrypoint_command(config.entrypoint)
    logger.info(f"running entrypoint: {cmd}")
    proc = subprocess.Popen(cmd, env=env)
    _signals.forward_to(proc)
    return _signals.exit_code(proc.wait())


if __name__ == "__main__":
    sys.exit(main())
