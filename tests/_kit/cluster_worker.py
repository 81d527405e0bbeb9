"""One rank of a 2-slot trial on a RecordingMaster, for test_cluster_distributed.py: runs
``_harness.run_trial`` the way the launch layer does and writes what it saw to OUT_JSON."""

from __future__ import annotations

import json
import os
import sys

import torch

# Run as a script: tests/ on sys.path makes ``_kit`` importable.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _kit.pytorch_trials import MLPTrial  # noqa: E402
from determined.pytorch._harness import run_trial  # noqa: E402

events: list[int] = []


class Recorded(MLPTrial):
    def train_batch(self, batch, epoch_idx, batch_idx):  # type: ignore[no-untyped-def]
        events.append(batch_idx)
        return super().train_batch(batch, epoch_idx, batch_idx)


if __name__ == "__main__":
    torch.set_num_threads(1)
    reason = run_trial(Recorded)
    # run_trial started the process group (USE_TORCH_DISTRIBUTED), so it must have ended it
    group_left = torch.distributed.is_initialized()
    with open(sys.argv[1], "w") as f:
        json.dump({"reason": reason.value, "events": events, "group_left": group_left}, f)
