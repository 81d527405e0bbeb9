"""Step 3: hyperparameter search.

Each trial reads its hyperparameters from the cluster info and trains for as long as each
searcher operation asks (``op.length`` is in batches here, per ``searcher.max_length``),
reporting the searcher metric when done. Locally there is one operation of length 1, so the
script trains ``LOCAL_BATCHES_PER_UNIT`` batches per unit to stay meaningful.
"""

from __future__ import annotations

import logging

from model import LinearModel

import determined as det
from determined import core

LOCAL_BATCHES_PER_UNIT = 100
DEFAULT_HPARAMS = {"lr": 0.05}


def main(core_context: core.Context) -> None:
    info = det.get_cluster_info()
    hparams = info.trial.hparams if info is not None else DEFAULT_HPARAMS
    scale = 1 if info is not None else LOCAL_BATCHES_PER_UNIT
    model = LinearModel(lr=float(hparams["lr"]))
    trained = 0
    for op in core_context.searcher.operations():
        while trained < op.length * scale:
            loss = model.train_batch()
            trained += 1
            if trained % 10 == 0:
                core_context.train.report_training_metrics(trained, {"loss": loss})
                op.report_progress(trained / scale)
        validation_loss = model.validate()
        core_context.train.report_validation_metrics(trained, {"validation_loss": validation_loss})
        op.report_completed(validation_loss)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with core.init() as core_context:
        main(core_context)
