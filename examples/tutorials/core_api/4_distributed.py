"""Step 4: several processes, one Core API.

Launch with torchrun (locally) or with `launcher: torch_distributed` on a master:

    torchrun --nproc-per-node 2 4_distributed.py

Every rank trains on its own data; the chief gathers the losses and reports their mean, and a
sharded checkpoint holds one file per rank.
"""

from __future__ import annotations

import logging

from model import LinearModel

import determined as det
from determined import core


def main(core_context: core.Context, batches: int = 50) -> None:
    dist = core_context.distributed
    model = LinearModel(seed=dist.get_rank())
    for steps_completed in range(1, batches + 1):
        loss = model.train_batch()
        losses = dist.gather(loss)
        if dist.get_rank() == 0 and steps_completed % 10 == 0:
            assert losses is not None
            mean = sum(losses) / len(losses)
            core_context.train.report_training_metrics(steps_completed, {"loss": mean})
    metadata = {"steps_completed": batches}
    with core_context.checkpoint.store_path(metadata, shard=True) as (path, storage_id):
        (path / f"model-rank{dist.get_rank()}.txt").write_text(repr(model.state()))
    if dist.get_rank() == 0:
        logging.info(f"sharded checkpoint {storage_id} written by {dist.get_size()} ranks")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    distributed = core.DistributedContext.from_torch_distributed()
    with core.init(distributed=distributed) as core_context:
        main(core_context)
