"""One rank of a gloo run with FSDP2 (``fully_shard``) models, for tests/pytorch/test_fsdp.py.

Run as ``python fsdp_worker.py PHASE OUT_JSON [CHECKPOINT]`` with torchrun's environment
variables set (WORLD_SIZE 1 or 2); writes what the test asserts on to OUT_JSON. ``train``:
train and resume; with CHECKPOINT also load it (with FSDP, then plain). ``load``: load it.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from typing import Any

import torch
import torch.distributed as tdist
from torch.distributed.fsdp import FSDPModule, fully_shard

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import determined.pytorch as det_torch  # noqa: E402
from _kit.pytorch_trials import Capture, MLPTrial, Regression  # noqa: E402
from determined import core  # noqa: E402
from determined.pytorch import Batch  # noqa: E402

HP = {"lr": 0.05, "n": 32, "batch_size": 4, "shuffle": True}
CONF = {"reproducibility": {"experiment_seed": 5}}


class FSDPTrial(MLPTrial):
    """MLPTrial with the model sharded by fully_shard and an Adam optimizer (sharded state)."""

    def __init__(self, context: Any) -> None:  # MLPTrial's fields, not its model
        self.context = context
        self.hp = hp = context.get_hparams()
        self.events: list[Any] = []
        self.train_set = Regression(hp["n"], seed=0)
        self.val_set = Regression(16, seed=1)  # 2 batches per rank: forwards are collectives
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        if self.hp.get("fsdp", True):
            for layer in (model[0], model[2]):
                fully_shard(layer)
            fully_shard(model)
        self.model = context.wrap_model(model)
        self.opt = context.wrap_optimizer(torch.optim.Adam(self.model.parameters(), lr=0.05))


def _full(t: torch.Tensor) -> list[float]:
    full = t.full_tensor() if hasattr(t, "full_tensor") else t
    return [float(x) for x in full.detach().flatten()]


def run(
    length: int, latest: str | None = None, fit: dict[str, Any] | None = None, **hp: Any
) -> dict[str, Any]:
    torch.manual_seed(0)
    capture = Capture()
    dist = core.DistributedContext.from_torch_distributed()
    with det_torch.init(hparams={**HP, **hp}, exp_conf=CONF, distributed=dist) as ctx:
        trial = FSDPTrial(ctx)
        trial.build_callbacks = lambda: {"capture": capture}  # type: ignore[method-assign]
        det_torch.Trainer(trial, ctx).fit(
            max_length=Batch(length), latest_checkpoint=latest, **(fit or {})
        )
    state = trial.opt.state_dict()["state"]
    return {
        "fsdp": isinstance(trial.model, FSDPModule),
        "params": [_full(p) for p in trial.model.parameters()],
        "exp_avg": [_full(state[k]["exp_avg"]) for k in sorted(state)],
        "local_numel": sum(
            (p.to_local() if hasattr(p, "to_local") else p).numel()
            for p in trial.model.parameters()
        ),
        "events": [i for _, i in trial.events],
        "uuids": capture.uuids,
    }


def main() -> None:
    import faulthandler

    faulthandler.dump_traceback_later(90, exit=True)  # a hang shows where, not just a timeout
    torch.set_num_threads(1)
    phase, out_file = sys.argv[1], sys.argv[2]
    latest = sys.argv[3] if len(sys.argv) > 3 else None
    tdist.init_process_group("gloo")
    out: dict[str, Any] = {}
    if phase == "train":  # straight to 8; to 4 (checkpoint); resumed from it to 8
        out["straight"] = run(8)
        out["first"] = run(4)
        out["resumed"] = run(8, latest=out["first"]["uuids"][-1])
        # async_checkpoints with FSDP2: written synchronously (DCP is a collective), same result
        out["async"] = run(4, fit={"async_checkpoints": True})
    if phase == "train" and latest is not None:  # one rank: load a 2-rank checkpoint too
        out["loaded"] = run(4, latest=latest)
        tdist.destroy_process_group()  # and again without FSDP or any process group
        out["plain"] = run(4, latest=latest, fsdp=False)
    elif phase == "load":  # restore ``latest`` and train nothing more
        out["loaded"] = run(4, latest=latest)
    with open(out_file, "w") as f:
        json.dump(out, f)
    if tdist.is_initialized():
        # What determined.pytorch.init does with a group it started (docs/pytorch.md, FSDP2):
        # meet, end the group, and free what still holds it, before the interpreter's teardown.
        tdist.barrier()
        tdist.destroy_process_group()
        gc.collect()


if __name__ == "__main__":
    main()
