"""One rank of a 2-process gloo DDP run for tests/pytorch/test_distributed.py.

Run as ``python _ddp_worker.py OUT_JSON`` with torchrun's environment variables set; writes
what the test asserts on to OUT_JSON.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
import torch.distributed as tdist

# Run as a script: tests/ on sys.path makes ``_kit`` importable.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import determined.pytorch as det_torch  # noqa: E402
from _kit.pytorch_trials import Capture, MLPTrial  # noqa: E402
from determined import core  # noqa: E402
from determined.pytorch import Batch, PyTorchCallback  # noqa: E402

HP = {"lr": 0.005, "dropout": 0.3, "shuffle": True, "n": 36, "batch_size": 4, "val_n": 12}
CONF = {"reproducibility": {"experiment_seed": 3}}


class AttributeTrial(MLPTrial):
    """Reads the model's own attributes through the DDP wrapper, as one-slot code does."""

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        first = getattr(self.model, "0")  # a submodule of the wrapped Sequential
        out = super().evaluate_batch(batch, batch_idx)
        out["weight_sum"] = first.weight.detach().sum()
        return out


class Outputs(PyTorchCallback):
    def __init__(self) -> None:
        self.val_batches: list[list[float]] = []
        self.write_end = 0

    def on_validation_epoch_end(self, outputs: list[Any]) -> None:
        self.val_batches.append([float(o["val_loss"]) for o in outputs])

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        self.write_end += 1


def run(
    length: int,
    latest: str | None = None,
    seed: int = 0,
    hp: dict[str, Any] = HP,
    agg: int = 1,
    **fit: Any,
) -> dict[str, Any]:
    torch.manual_seed(seed)  # same initial weights for the straight and the first run
    capture, outputs = Capture(), Outputs()
    dist = core.DistributedContext.from_torch_distributed()
    with det_torch.init(
        hparams=hp, exp_conf=CONF, distributed=dist, aggregation_frequency=agg
    ) as ctx:
        trial = AttributeTrial(ctx)
        trial.build_callbacks = lambda: {"capture": capture, "out": outputs}  # type: ignore
        det_torch.Trainer(trial, ctx).fit(max_length=Batch(length), latest_checkpoint=latest, **fit)
    module = trial.model.module
    return {
        "ddp": isinstance(trial.model, torch.nn.parallel.DistributedDataParallel),
        "weight_via_wrapper": getattr(trial.model, "0").weight.sum().item(),
        "weight": module[0].weight.sum().item(),
        "events": [i for _, i in trial.events],
        "params": [p.detach().flatten().tolist() for p in module.parameters()],
        "training": capture.training,
        "validation": capture.validation,
        "val_batches": outputs.val_batches,
        "uuids": capture.uuids,
        "write_end": outputs.write_end,
    }


def main() -> None:
    torch.set_num_threads(1)
    tdist.init_process_group("gloo")
    straight = run(10, validation_period=Batch(5), reporting_period=Batch(5))
    first = run(4)
    resumed = run(10, latest=first["uuids"][-1], seed=123)  # restore must fix RNG
    # With data-loading workers, resumed at the end of an epoch (5 batches per rank).
    workers = {**HP, "num_workers": 2}
    w_straight = run(8, hp=workers)
    w_first = run(5, hp=workers)
    w_resumed = run(8, latest=w_first["uuids"][-1], seed=123, hp=workers)
    # Asynchronous checkpoints: every rank's RNG state goes to the chief, which writes them.
    a_first = run(4, async_checkpoints=True, checkpoint_period=Batch(2))
    a_resumed = run(10, latest=a_first["uuids"][-1], seed=123, async_checkpoints=True)
    out = {"straight": straight, "first": first, "resumed": resumed}
    out.update(a_first=a_first, a_resumed=a_resumed)
    out.update(w_straight=w_straight, w_resumed=w_resumed)
    # Gradient aggregation over 2 batches per rank, with DDP's no_sync in between.
    plain = {"lr": 0.05, "n": 36, "batch_size": 4}
    out["agg"] = run(4, hp=plain, agg=2)
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
