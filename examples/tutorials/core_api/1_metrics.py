"""Step 1: report training and validation metrics.

Locally they are logged and written as TensorBoard files under
``$DET_HOME/tensorboard`` (``~/.local/share/redetermined/tensorboard``); on a master they are
stored with the trial and shown by ``det t describe`` and the web UI.
"""

from __future__ import annotations

import logging

from model import LinearModel

import determined as det
from determined import core


def main(core_context: core.Context, batches: int = 100) -> None:
    model = LinearModel()
    losses = []
    for batch in range(batches):
        losses.append(model.train_batch())
        steps_completed = batch + 1
        if steps_completed % 10 == 0:
            core_context.train.report_training_metrics(
                steps_completed=steps_completed, metrics={"loss": sum(losses) / len(losses)}
            )
            losses = []
        if steps_completed % 50 == 0:
            core_context.train.report_validation_metrics(
                steps_completed=steps_completed, metrics={"validation_loss": model.validate()}
            )


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with core.init() as core_context:
        main(core_context)
