"""Runs of the exact-resume matrix, shared by the in-process cells and the two-rank worker
(tests/pytorch/test_resume_matrix.py).

One cell is (kind, resume point, where, ranks). One uninterrupted run per kind checkpoints at
every resume point; each resumed run starts from one of those checkpoints, in a process whose
global RNGs were seeded at random (as torch seeds a new process), and must end with bitwise the
weights and optimizer state of the uninterrupted run, having trained the same losses.
"""

from __future__ import annotations

import json
import pathlib
import random
from typing import Any

import numpy as np
import torch

import determined.pytorch as det_torch
from _kit.resume_trial import ResumeTrial, state
from determined import core
from determined.pytorch import Batch, PyTorchCallback

KINDS = ("shuffle", "workers", "dropout")
N, BATCH = 32, 4  # 8 global batches per epoch


def plan(ranks: int) -> tuple[list[int], int]:
    """Resume points (mid-epoch, the first epoch's end, inside the second epoch) and the run's
    length, in batches per rank; the points are multiples of the checkpoint period."""
    epoch = N // BATCH // ranks
    return [epoch // 2, epoch, epoch + epoch // 2], 2 * epoch + epoch // 4


def fresh_process_rngs() -> None:
    """What a new process starts with: torch, numpy and python RNGs seeded at random."""
    torch.seed()
    np.random.seed(None)
    random.seed()


class Uuids(PyTorchCallback):
    def __init__(self) -> None:
        self.uuids: list[str] = []

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        self.uuids.append(uuid)


def run(
    kind: str,
    length: int,
    latest: str | None = None,
    distributed: bool = False,
    **fit: Any,
) -> tuple[ResumeTrial, list[str]]:
    fresh_process_rngs()
    uuids = Uuids()
    # One context per run: init() closes the one it was given.
    dist = core.DistributedContext.from_torch_distributed() if distributed else None
    with det_torch.init(hparams={"kind": kind, "n": N, "batch_size": BATCH}, distributed=dist) as c:
        trial = ResumeTrial(c)
        trial.build_callbacks = lambda: {"uuids": uuids}  # type: ignore[method-assign]
        det_torch.Trainer(trial, c).fit(
            max_length=Batch(length), latest_checkpoint=latest, checkpoint_policy="none", **fit
        )
    return trial, uuids.uuids


def steps(uuid: str) -> int:
    from determined.common import _paths

    meta = json.loads((_paths.default_checkpoint_dir() / uuid / "metadata.json").read_text())
    return int(meta["steps_completed"])


def cells(kind: str, ranks: int = 1) -> dict[str, Any]:
    """The uninterrupted run of ``kind`` and one resumed run per resume point: their losses
    by batch and their final state."""
    points, length = plan(ranks)
    dist = ranks > 1
    straight, uuids = run(kind, length, distributed=dist, checkpoint_period=Batch(points[0]))
    at = {steps(u): u for u in uuids}
    out: dict[str, Any] = {"straight": {"losses": straight.losses, **state(straight)}}
    for k in points:
        resumed, _ = run(kind, length, latest=at[k], distributed=dist)
        out[str(k)] = {"losses": resumed.losses, **state(resumed)}
    return out


def mismatches(result: dict[str, Any], ranks: int) -> list[str]:
    """The cells of ``cells()``'s result whose resumed run differs from the straight one."""
    points, length = plan(ranks)
    straight = result["straight"]
    bad = []
    for k in points:
        resumed = result[str(k)]
        losses = {int(i): v for i, v in resumed["losses"].items()}
        want = {int(i): v for i, v in straight["losses"].items() if int(i) >= k}
        if sorted(losses) != list(range(k, length)):
            bad.append(f"resumed at {k}: trained batches {sorted(losses)}")
        elif losses != want:
            first = min(i for i in losses if losses[i] != want[i])
            bad.append(f"resumed at {k}: losses differ from batch {first} on")
        for key in ("params", "momentum"):
            if resumed[key] != straight[key]:
                bad.append(f"resumed at {k}: {key} differ")
    return bad


def to_json(path: pathlib.Path, obj: Any) -> None:
    path.write_text(json.dumps(obj))
