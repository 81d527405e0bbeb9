"""``determined.pytorch.__all__`` matches what is importable."""

from __future__ import annotations

import determined.pytorch as det_torch


def test_all_is_importable_and_public() -> None:
    for name in det_torch.__all__:
        assert hasattr(det_torch, name), name
        assert not name.startswith("_")
    public = {n for n in dir(det_torch) if not n.startswith("_")}
    modules = {"samplers", "experimental", "deepspeed"}  # subpackages, once imported
    assert public - set(det_torch.__all__) <= modules | {"annotations"}
    assert sorted(det_torch.__all__) == det_torch.__all__


def test_reference_names_exist() -> None:
    for name in (
        "PyTorchTrial",
        "PyTorchTrialContext",
        "PyTorchCallback",
        "LRScheduler",
        "MetricReducer",
        "Reducer",
        "DataLoader",
        "Trainer",
        "init",
        "Batch",
        "Epoch",
        "TrainUnit",
        "load_trial_from_checkpoint_path",
        "to_device",
    ):
        assert name in det_torch.__all__
