"""What a master that stopped abruptly (kill -9, power loss, a full disk) left half done, finished
when the next one starts on the same store.

- :func:`kill_leftovers`: the processes a previous master (killed with -9) left running.
- :func:`remove_work_dirs`: run work dirs under the work root (no run survives a restart:
  the resource manager kills a previous master's trials first).
- :func:`remove_staging`: in every directory storage the store's experiments use, checkpoints
  still staged (``.<id>.tmp``: their trial died before the commit, nobody will finish them) and
  ones renamed for deletion (``.<id>.deleting``: a delete cut short; the record is marked
  DELETED, as the files are gone or going).
- :func:`resume_gc_async`: checkpoint GC of every ended experiment, again; GC is idempotent, so
  an experiment whose GC already ran loses nothing more, and one whose GC was cut short
  finishes.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import signal
import threading
from typing import Any

import sqlalchemy as sa

from determined.common import storage
from determined.master.experiment import State
from determined.master.resources._gc import collect
from determined.master.store import Store, _checkpoints, _experiments
from determined.master.store._schema import storage_backends

logger = logging.getLogger("determined.master")


def kill_leftovers(allocation_ids: list[str], cluster_id: str) -> list[int]:
    """SIGKILL the processes a previous master (killed with -9) left running for these
    allocations, found by the ``DET_ALLOCATION_ID`` and ``DET_CLUSTER_ID`` in their
    environment; returns their pids. Only this user's processes are readable, which is all a
    master can have started.

    The cluster id matters: allocation ids repeat across masters (the request id in them is
    drawn from ``experiment_seed``, which defaults to the current second), and another master
    on this machine may run an allocation of the same id right now."""
    wanted = {f"DET_ALLOCATION_ID={a}".encode() for a in allocation_ids}
    ours = f"DET_CLUSTER_ID={cluster_id}".encode()
    killed = []
    for proc in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            env = set((proc / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if ours in env and env & wanted:
            try:
                os.kill(int(proc.name), signal.SIGKILL)
                killed.append(int(proc.name))
            except OSError:
                pass
    return killed


def remove_work_dirs(work_root: pathlib.Path) -> None:
    """Remove every run's work dir left under ``work_root``; call it before any run starts."""
    if not work_root.is_dir():
        return
    for child in work_root.iterdir():
        logger.info("removing the work dir %s a previous master left", child)
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def _directory_bases(conn: sa.Connection) -> set[pathlib.Path]:
    """The base paths of the directory storages (shared_fs, directory) anything here used."""
    configs: list[dict[str, Any]] = []
    for exp_id in _experiments.list_experiment_ids(conn):
        exp = _experiments.get_experiment(conn, exp_id)
        if exp is not None:
            configs.append(dict(exp["config"].get("checkpoint_storage") or {}))
    for (config,) in conn.execute(sa.select(storage_backends.c.config)):
        configs.append(dict(config if isinstance(config, dict) else json.loads(config or "{}")))
    bases = set()
    for config in configs:
        if config.get("type") not in ("shared_fs", "directory"):
            continue
        try:
            manager = storage.build(config)
        except Exception:  # a config this master cannot build has no leftovers of ours
            continue
        if isinstance(manager, storage.DirectoryStorageManager):
            bases.add(manager.base_path)
    return bases


def remove_staging(store: Store) -> None:
    """Remove staged and half-deleted checkpoints from every directory storage in use; call it
    before any run starts (a live trial's staging is not a leftover)."""
    with store.read() as conn:
        bases = _directory_bases(conn)
    for base in sorted(bases):
        if not base.is_dir():
            continue
        for leftover in sorted(base.glob(".*.tmp")) + sorted(base.glob(".*.deleting")):
            logger.info("removing the checkpoint leftover %s", leftover)
            shutil.rmtree(leftover, ignore_errors=True)
            if leftover.suffix == ".deleting":
                uuid = leftover.name[1 : -len(".deleting")]
                with store.tx() as conn:
                    if _checkpoints.get(conn, uuid) is not None:
                        _checkpoints.update_resources(conn, uuid, None)


def resume_gc_async(store: Store) -> None:
    """Run checkpoint GC of every ended experiment on a background thread."""

    def run() -> None:
        with store.read() as conn:
            ended = [
                i
                for i in _experiments.list_experiment_ids(conn)
                if (e := _experiments.get_experiment(conn, i)) is not None
                and State(e["state"]).is_terminal
            ]
        for exp_id in ended:
            try:
                collect(store, exp_id)
            except Exception:
                logger.exception("checkpoint GC of experiment %d failed", exp_id)

    threading.Thread(target=run, name="gc-resume", daemon=True).start()
