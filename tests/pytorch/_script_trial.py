"""A trial defined in a script run as ``__main__`` (for test_checkpoint.py): trains 2 batches
locally and prints the checkpoint's storage id."""

from __future__ import annotations

import os
import sys
from typing import Any

# Run as a script: tests/ on sys.path makes ``_kit`` importable.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _kit.pytorch_trials import MLPTrial  # noqa: E402

import determined.pytorch as det_torch  # noqa: E402


class ScriptTrial(MLPTrial):
    pass


class Uuid(det_torch.PyTorchCallback):
    def on_checkpoint_upload_end(self, uuid: str) -> None:
        print(uuid)


if __name__ == "__main__":
    with det_torch.init(hparams={}) as ctx:
        trial: Any = ScriptTrial(ctx)
        trial.build_callbacks = lambda: {"uuid": Uuid()}
        det_torch.Trainer(trial, ctx).fit(max_length=det_torch.Batch(2))
