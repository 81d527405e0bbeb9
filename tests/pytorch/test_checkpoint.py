"""Checkpoint layout, resume and loading (docs/reference/harness.md §13, §16)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from _kit.pytorch_trials import MLPTrial, ckpt_dir, params, run_local

import determined.pytorch as det_torch
from determined.pytorch import Batch, Epoch

HP = {"lr": 0.005, "dropout": 0.3, "shuffle": True, "n": 36, "batch_size": 4}
SEEDED = {"reproducibility": {"experiment_seed": 7}}


class SchedTrial(MLPTrial):
    """Adds momentum (optimizer state) and a stepping LR scheduler."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.opt.param_groups[0]["momentum"] = 0.9
        self.sched = context.wrap_lr_scheduler(
            torch.optim.lr_scheduler.StepLR(self.opt, step_size=3, gamma=0.7),
            det_torch.LRScheduler.StepMode.STEP_EVERY_BATCH,
        )


def _seed(s: int = 0) -> None:
    torch.manual_seed(s)


def test_checkpoint_layout() -> None:
    """§19 items 56 and 57: code/, state_dict.pth, trial_state.json (deviation: JSON, not
    trial_state.pkl), rng_state/, load_data.json and metadata.json with the documented keys;
    trial_cls_spec is module:Qualname and is_trainer is true for Trainer runs."""
    _, cap, _ = run_local(SchedTrial, hparams=HP, max_length=Batch(5))
    path = ckpt_dir(cap.uuids[-1])
    names = {p.name for p in path.iterdir()}
    assert {"code", "state_dict.pth", "trial_state.json", "rng_state"} <= names
    assert {"load_data.json", "metadata.json"} <= names
    assert "trial_state.pkl" not in names
    state = torch.load(path / "state_dict.pth", weights_only=True)
    assert set(state) == {
        "models_state_dict",
        "optimizers_state_dict",
        "lr_schedulers_state_dict",
        "callbacks",
        "rng_state",
    }
    assert set(state["rng_state"]) >= {"cpu_rng_state", "np_rng_state", "random_rng_state"}
    assert set(state["callbacks"]) == {"rec", "capture"}
    load_data = json.loads((path / "load_data.json").read_text())
    module = SchedTrial.__module__  # "test_checkpoint", or dotted under --import-mode=importlib
    assert load_data["trial_cls_spec"] == f"{module}:SchedTrial"
    assert load_data["is_trainer"] is True and load_data["trial_type"] == "PyTorchTrial"
    assert load_data["hparams"]["lr"] == 0.005 and load_data["experiment_config"] is None
    meta = json.loads((path / "metadata.json").read_text())
    assert meta["steps_completed"] == 5 and meta["framework"].startswith("torch-")
    progress = json.loads((path / "trial_state.json").read_text())
    assert progress["batches_trained"] == 5 and progress["format_version"] == 1
    package = module.rpartition(".")[0].replace(".", "/")
    assert (path / "code" / package / "test_checkpoint.py").is_file()
    assert not any(p.name == "__pycache__" for p in (path / "code").rglob("*"))


def _train(k: int, n: int, hp: dict[str, Any], cls: type = SchedTrial, **fit: Any) -> Any:
    """Straight to n, or to k then resume to n; returns the final trial."""
    _seed()
    trial, cap, _ = run_local(cls, hparams=hp, exp_conf=SEEDED, max_length=Batch(k), **fit)
    if k == n:
        return trial
    _seed(123)  # the resumed process starts from another RNG state: restore must fix it
    resumed, _, _ = run_local(
        cls, hparams=hp, exp_conf=SEEDED, max_length=Batch(n), latest_checkpoint=cap.uuids[-1]
    )
    return resumed


def _assert_same(a: Any, b: Any) -> None:
    for pa, pb in zip(params(a.model), params(b.model), strict=True):
        assert torch.equal(pa, pb)
    sa, sb = a.opt.state_dict(), b.opt.state_dict()
    for key in sa["state"]:
        assert torch.equal(sa["state"][key]["momentum_buffer"], sb["state"][key]["momentum_buffer"])
    assert sa["param_groups"][0]["lr"] == sb["param_groups"][0]["lr"]


@pytest.mark.parametrize("k", [4, 9])  # mid-epoch, and at the end of the first epoch
def test_exact_resume_bitwise(k: int) -> None:
    """Exact resume (§19 item 58): k batches + resume to 14 equals 14 straight, bitwise, with
    shuffle, dropout and momentum; 9 batches per epoch."""
    straight = _train(14, 14, HP)
    resumed = _train(k, 14, HP)
    _assert_same(straight, resumed)
    assert [i for _, i in resumed.events] == list(range(k, 14))
    assert resumed.sched.last_epoch == straight.sched.last_epoch == 14


def test_exact_resume_with_workers() -> None:
    """Exact resume with num_workers=2 (per-sample seeds from (seed, epoch, index))."""
    hp = {**HP, "num_workers": 2}
    _assert_same(_train(12, 12, hp), _train(5, 12, hp))


def test_validation_does_not_change_training() -> None:
    """Validation and checkpointing leave the training random streams alone."""
    a = _train(12, 12, HP)
    b = _train(12, 12, HP, validation_period=Batch(2), checkpoint_period=Batch(3))
    _assert_same(a, b)


def test_resume_skips_indices_without_loading() -> None:
    """§19 item 59: resume at S: the first idx is S, data starts at element S, and skipped
    batches never call __getitem__ (unshuffled, so element S is known)."""
    hp = {"n": 40, "batch_size": 4}
    _, cap, _ = run_local(hparams=hp, max_length=Batch(3))
    trial, _, _ = run_local(hparams=hp, max_length=Batch(5), latest_checkpoint=cap.uuids[-1])
    assert trial.events[0] == (0, 3)
    assert trial.train_set.loaded == list(range(12, 20))


def test_resume_restores_counters_callbacks_and_epoch() -> None:
    """§19 item 58: same-trial resume restores counters and callback state; epochs continue."""
    hp = {"n": 20, "batch_size": 4}  # 5 batches per epoch
    _, cap, _ = run_local(hparams=hp, max_length=Batch(7))
    trial, _, log = run_local(hparams=hp, max_length=Epoch(2), latest_checkpoint=cap.uuids[-1])
    assert trial.events == [(1, 7), (1, 8), (1, 9)]
    assert log[1] == ("on_checkpoint_load_start",) and log[2] == ("load_state_dict",)


def test_other_trial_resume_restores_weights_only() -> None:
    """§19 item 58: a checkpoint of another trial warm-starts weights only."""
    from _kit.pytorch_trials import Capture

    from determined.pytorch._controller import Controller, LoopSettings
    from determined.pytorch._periods import Periods

    capture = Capture()
    with det_torch.init(hparams=HP) as ctx:
        first = SchedTrial(ctx)
        first.build_callbacks = lambda: {"capture": capture}  # type: ignore[method-assign]
        settings = LoopSettings(periods=Periods(), max_length=Batch(6), trial_id=5)
        Controller(first, ctx, settings).run()
    uuid = capture.uuids[-1]
    assert json.loads((ckpt_dir(uuid) / "trial_state.json").read_text())["trial_id"] == 5
    log: list[Any] = []
    with det_torch.init(hparams={**HP, "callback_log": log}) as ctx:
        trial = SchedTrial(ctx)
        det_torch.Trainer(trial, ctx).fit(max_length=Batch(0), latest_checkpoint=uuid)
    for a, b in zip(params(first.model), params(trial.model), strict=True):
        assert torch.equal(a, b)
    assert trial.events == [] and trial.opt.state_dict()["state"] == {}
    assert trial.sched.last_epoch == 0
    assert ("load_state_dict",) not in log


def test_load_trial_from_checkpoint_path() -> None:
    """§19 item 71: restores weights; honours trial_class; no json -> AssertionError."""
    trial, cap, _ = run_local(SchedTrial, hparams=HP, max_length=Batch(4))
    path = ckpt_dir(cap.uuids[-1])
    loaded = det_torch.load_trial_from_checkpoint_path(path)
    assert type(loaded).__name__ == "SchedTrial"  # imported from code/
    assert isinstance(loaded.context, det_torch.CheckpointLoadContext)
    for a, b in zip(params(trial.model), params(loaded.model), strict=True):
        assert torch.equal(a, b)
    explicit = det_torch.load_trial_from_checkpoint_path(path, trial_class=MLPTrial)
    assert type(explicit) is MLPTrial
    (path / "load_data.json").unlink()
    (path / "metadata.json").unlink()
    with pytest.raises(AssertionError):
        det_torch.load_trial_from_checkpoint_path(path)


def test_code_copy_is_filtered_and_bounded(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """§13 code/: the model dir only, without caches, hidden files, .detignore matches or the
    checkpoint store, and bounded in files and bytes (one warning for what is skipped)."""
    from determined.pytorch import _state

    src = tmp_path / "model"
    (src / "pkg" / "__pycache__").mkdir(parents=True)
    (src / "store").mkdir()
    (src / "model_def.py").write_text("x = 1\n")
    (src / "pkg" / "util.py").write_text("y = 2\n")
    (src / "pkg" / "__pycache__" / "util.pyc").write_bytes(b"\0")
    (src / ".secret").write_text("token")
    (src / "data.csv").write_text("1,2\n")
    (src / "store" / "ckpt.bin").write_bytes(b"\0" * 10)
    (src / ".detignore").write_text("# data\n*.csv\n")
    _state.copy_code(src, tmp_path / "out", exclude=src / "store")
    copied = sorted(
        p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*")
    )
    assert copied == ["model_def.py", "pkg", "pkg/util.py"]
    monkeypatch.setattr(_state, "CODE_LIMIT_FILES", 1)
    _state.copy_code(src, tmp_path / "few")
    assert len([p for p in (tmp_path / "few").rglob("*") if p.is_file()]) == 1
    assert "skipped 2 files" in caplog.text


@pytest.mark.e2e
def test_trial_defined_in_a_script_loads_back() -> None:
    """§16: a trial class defined in the script being run (module ``__main__``) is recorded
    under the script's name and imports back from code/."""
    import pathlib
    import subprocess
    import sys

    script = pathlib.Path(__file__).with_name("_script_trial.py")
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True, timeout=120
    )
    path = ckpt_dir(out.stdout.split()[-1])
    spec = json.loads((path / "load_data.json").read_text())["trial_cls_spec"]
    assert spec == "_script_trial:ScriptTrial"
    loaded = det_torch.load_trial_from_checkpoint_path(path)
    assert type(loaded).__name__ == "ScriptTrial"


class StopAtFive(SchedTrial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        if batch_idx == 4:
            self.context.set_stop_requested(True)
        return super().train_batch(batch, epoch_idx, batch_idx)


def test_exact_resume_after_a_stop_at_a_reporting_boundary() -> None:
    """Exact resume after a stop (as after preemption): stopped at the boundary after batch 5
    (reporting every 3 -> 6), resumed to 14, bitwise equal to 14 straight."""
    straight = _train(14, 14, HP)
    _seed()
    stopped, cap, _ = run_local(
        StopAtFive, hparams=HP, exp_conf=SEEDED, max_length=Batch(14), reporting_period=Batch(3)
    )
    assert stopped.reason == det_torch.ExitReason.STOPPED
    assert [i for _, i in stopped.events] == list(range(6))
    _seed(123)
    resumed, _, _ = run_local(
        SchedTrial,
        hparams=HP,
        exp_conf=SEEDED,
        max_length=Batch(14),
        latest_checkpoint=cap.uuids[-1],
    )
    assert [i for _, i in resumed.events] == list(range(6, 14))
    _assert_same(straight, resumed)


class Augmented(torch.utils.data.Dataset):
    """Random augmentation inside the dataset: noise from the global torch RNG per sample."""

    def __init__(self, base: Any) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> Any:
        x, y = self.base[i]
        return x + 0.1 * torch.randn(x.shape), y


class AugTrial(SchedTrial):
    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.train_set = Augmented(self.train_set)


@pytest.mark.parametrize("workers", [0, 2])
def test_exact_resume_with_augmentation(workers: int) -> None:
    """Exact resume with random augmentation in the dataset, shuffle and dropout, loaded in
    the main process (RNG restored from the checkpoint) or by 2 workers (per-sample seeds)."""
    hp = {**HP, "num_workers": workers}
    _assert_same(_train(13, 13, hp, AugTrial), _train(7, 13, hp, AugTrial))


class RandomValidationTrial(SchedTrial):
    """Validation that draws from every global stream (torch, numpy, python) on each batch."""

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        import random

        import numpy as np

        noise = torch.rand(()) + float(np.random.rand()) + random.random()
        return {**super().evaluate_batch(batch, batch_idx), "noise": noise}


def test_extra_validations_that_draw_random_numbers_do_not_change_training() -> None:
    """Exact resume: a run validating every 2 batches (validation drawing from torch, numpy
    and python's RNGs) trains bitwise like one validating only at the end, with dropout,
    shuffling and two loader workers. Fails if the RNG is not restored around validation."""
    hp = {**HP, "num_workers": 2}
    plain = _train(12, 12, hp, cls=RandomValidationTrial)
    extra = _train(12, 12, hp, cls=RandomValidationTrial, validation_period=Batch(2))
    _assert_same(plain, extra)
