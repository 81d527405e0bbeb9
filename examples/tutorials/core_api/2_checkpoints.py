"""Step 2: checkpoints, resuming, and preemption.

The script saves its state every 20 batches and whenever it is asked to stop: on a master when
the experiment is paused, locally on Ctrl-C or SIGTERM (a second Ctrl-C kills at once). It
resumes from the latest checkpoint: on a master the one the master names, locally the one whose
id this script wrote to ``latest_checkpoint`` next to itself. A resumed run ends with exactly the
weights of a run that was never stopped.

    python 2_checkpoints.py          # trains for ~4 s; press Ctrl-C to stop it cleanly
    python 2_checkpoints.py          # continues where it stopped
    python 2_checkpoints.py --fresh  # starts over
"""

from __future__ import annotations

import argparse
import json
import logging
import pathlib
import time

from model import LinearModel

import determined as det
from determined import core

LOCAL_LATEST = pathlib.Path(__file__).with_name("latest_checkpoint")
# Stands in for the real work of a training step, so that there is time to press Ctrl-C.
STEP_SECONDS = 0.02


def latest_checkpoint(fresh: bool) -> str | None:
    info = det.get_cluster_info()
    if info is not None:
        return info.latest_checkpoint
    if LOCAL_LATEST.exists() and not fresh:
        return LOCAL_LATEST.read_text().strip() or None
    return None


def save(core_context: core.Context, model: LinearModel, steps_completed: int) -> None:
    metadata = {"steps_completed": steps_completed}
    with core_context.checkpoint.store_path(metadata) as (path, storage_id):
        (path / "model.json").write_text(json.dumps(model.state()))
    if det.get_cluster_info() is None:
        LOCAL_LATEST.write_text(storage_id)
    # core logs "saved checkpoint <id> (steps_completed N)" itself.


def load(core_context: core.Context, model: LinearModel, storage_id: str) -> int:
    with core_context.checkpoint.restore_path(storage_id) as path:
        model.load_state(json.loads((path / "model.json").read_text()))
        steps_completed = int(json.loads((path / "metadata.json").read_text())["steps_completed"])
    logging.info(f"resumed from checkpoint {storage_id} at batch {steps_completed}")
    return steps_completed


def main(core_context: core.Context, batches: int = 200, fresh: bool = False) -> None:
    model = LinearModel()
    start = 0
    storage_id = latest_checkpoint(fresh)
    if storage_id is not None:
        start = load(core_context, model, storage_id)
    for steps_completed in range(start + 1, batches + 1):
        loss = model.train_batch()
        time.sleep(STEP_SECONDS)
        if steps_completed % 10 == 0:
            core_context.train.report_training_metrics(steps_completed, {"loss": loss})
        saved = steps_completed % 20 == 0 or steps_completed == batches
        if saved:
            save(core_context, model, steps_completed)
        # Cheap after the first call; every rank must call it in step (it is a collective).
        if core_context.preempt.should_preempt():
            if not saved:
                save(core_context, model, steps_completed)
            logging.info(f"asked to stop: state saved at batch {steps_completed}, exiting")
            return
    core_context.train.report_validation_metrics(batches, {"validation_loss": model.validate()})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Core API tutorial, step 2: checkpoints")
    parser.add_argument("--fresh", action="store_true", help="ignore the latest checkpoint")
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with core.init() as core_context:
        main(core_context, args.batches, args.fresh)
