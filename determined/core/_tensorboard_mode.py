"""``TensorboardMode``: who writes and uploads a trial's TensorBoard files."""

from __future__ import annotations

import enum


class TensorboardMode(enum.Enum):
    """How TensorBoard files are handled; chosen once, in ``core.init(tensorboard_mode=...)``.

    ``AUTO`` (the default): the chief writes every reported training and validation metric as
    tfevents files under ``TrainContext.get_tensorboard_path()``, and the files there are synced
    to storage after each report (at most once a second) and once more when the context closes.
    ``upload_tensorboard_files()`` raises RuntimeError in this mode.

    ``MANUAL``: nothing is written or uploaded for you; write your own files under
    ``get_tensorboard_path()`` and upload them with ``TrainContext.upload_tensorboard_files()``.
    """

    AUTO = "AUTO"
    MANUAL = "MANUAL"
