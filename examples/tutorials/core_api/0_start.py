"""Step 0: a training script inside the Core API.

Run it locally:      python 0_start.py
Run it on a master:  det e create 0_start.yaml .
"""

from __future__ import annotations

import logging

from model import LinearModel

import determined as det
from determined import core


def main(core_context: core.Context, batches: int = 100) -> None:
    model = LinearModel()
    for batch in range(batches):
        loss = model.train_batch()
        if batch % 10 == 9:
            logging.info(f"batch {batch + 1}: loss={loss:.4f}")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with core.init() as core_context:
        main(core_context)
