"""Asynchronous checkpoints in PyTorchTrial (issue #19 item 1, docs/pytorch.md): staged on the
loop's thread, written in the background, failures at the next boundary, bitwise resume."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
import torch
from _kit.pytorch_trials import MLPTrial, ckpt_dir, params, run_local

from determined import errors
from determined.common import _paths
from determined.pytorch import Batch, PyTorchCallback

HP = {"lr": 0.005, "dropout": 0.3, "shuffle": True, "n": 36, "batch_size": 4}
SEEDED = {"reproducibility": {"experiment_seed": 7}}


class MomentumTrial(MLPTrial):
    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.opt.param_groups[0]["momentum"] = 0.9


def _committed() -> set[str]:
    base = _paths.default_checkpoint_dir()
    return (
        {p.name for p in base.iterdir() if not p.name.startswith(".")} if base.exists() else set()
    )


def _train(k: int, n: int, *, async_first: bool, async_resume: bool) -> Any:
    torch.manual_seed(0)
    trial, cap, _ = run_local(
        MomentumTrial,
        hparams=HP,
        exp_conf=SEEDED,
        max_length=Batch(k),
        checkpoint_period=Batch(3),
        async_checkpoints=async_first,
    )
    if k == n:
        return trial
    torch.manual_seed(123)
    resumed, _, _ = run_local(
        MomentumTrial,
        hparams=HP,
        exp_conf=SEEDED,
        max_length=Batch(n),
        latest_checkpoint=cap.uuids[-1],
        async_checkpoints=async_resume,
    )
    return resumed


def test_async_resume_is_bitwise_equal_to_a_straight_run() -> None:
    """Checkpoints written in the background (every 3 batches, the last at 8) resume to 14
    bitwise like 14 straight batches: weights and momentum."""
    straight = _train(14, 14, async_first=False, async_resume=False)
    resumed = _train(8, 14, async_first=True, async_resume=True)
    for a, b in zip(params(straight.model), params(resumed.model), strict=True):
        assert torch.equal(a, b)
    sa, sb = straight.opt.state_dict()["state"], resumed.opt.state_dict()["state"]
    for key in sa:
        assert torch.equal(sa[key]["momentum_buffer"], sb[key]["momentum_buffer"])
    assert [i for _, i in resumed.events] == list(range(8, 14))


class SlowWrite(PyTorchCallback):
    """Holds the background write of the first checkpoint until the loop has trained on."""

    def __init__(self, trial: Any) -> None:
        self.trial = trial
        self.trained_during_write: list[int] = []

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        if self.trained_during_write:
            return
        # The first checkpoint is at batch 2: wait (on the writer thread) until the loop has
        # trained batches 2 and 3, which it can do only if it is not waiting for this write.
        deadline = time.monotonic() + 20
        while len(self.trial.events) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.trained_during_write.extend(i for _, i in self.trial.events[2:4])


class SlowWriteTrial(MLPTrial):
    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        self.slow = SlowWrite(self)
        return {**super().build_callbacks(), "slow": self.slow}


def test_training_goes_on_while_the_checkpoint_is_written() -> None:
    """The loop blocks only for staging: while the first checkpoint (at batch 2) is written,
    the loop trains batches 2 and 3; the uuid reaches on_checkpoint_upload_end afterwards,
    and the checkpoint holds the state of batch 2, not later."""
    trial, cap, log = run_local(
        SlowWriteTrial,
        hparams={"n": 40, "batch_size": 4},
        max_length=Batch(6),
        checkpoint_period=Batch(2),
        async_checkpoints=True,
    )
    assert trial.slow.trained_during_write[:2] == [2, 3]
    assert len(cap.uuids) == 3 and set(cap.uuids) <= _committed()
    meta = (ckpt_dir(cap.uuids[0]) / "trial_state.json").read_text()
    assert '"batches_trained": 2' in meta
    names = [e[0] for e in log]
    first_upload_end = names.index("on_checkpoint_upload_end")
    assert names.index("on_checkpoint_write_end") < first_upload_end


class FailingWrite(PyTorchCallback):
    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        raise OSError("disk full (test)")


class FailingTrial(MLPTrial):
    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        return {**super().build_callbacks(), "fail": FailingWrite()}


def test_a_background_failure_surfaces_at_the_next_boundary_and_saves_nothing() -> None:
    """A failed background write raises CheckpointFailed in the loop (naming the cause) and
    leaves neither a committed checkpoint nor its staging directory."""
    before = _committed()
    trial: list[Any] = []

    class Keep(FailingTrial):
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            trial.append(self)

    with pytest.raises(errors.CheckpointFailed, match="disk full"):
        run_local(
            Keep,
            hparams={"n": 40},
            max_length=Batch(8),
            checkpoint_period=Batch(2),
            async_checkpoints=True,
        )
    assert _committed() == before
    base = _paths.default_checkpoint_dir()
    assert not [p for p in base.iterdir() if p.name.endswith(".tmp")]
    assert len(trial[0].events) < 8  # it stopped at a boundary, not at the end


def test_config_field_turns_it_on_and_fit_overrides() -> None:
    """optimizations.async_checkpoints in the config; fit(async_checkpoints=False) wins; a
    non-bool is a TypeError naming the keyword. Unset, a trial whose callback overrides
    on_checkpoint_write_end checkpoints synchronously (the decision and its numbers:
    docs/pytorch.md, "Asynchronous checkpoints")."""
    with pytest.raises(OSError, match="disk full"):  # the default: the hook's error itself
        run_local(FailingTrial, max_length=Batch(4), checkpoint_period=Batch(2))
    conf = {"optimizations": {"async_checkpoints": True}}
    with pytest.raises(errors.CheckpointFailed):
        run_local(FailingTrial, exp_conf=conf, max_length=Batch(4), checkpoint_period=Batch(2))
    with pytest.raises(OSError, match="disk full"):  # synchronous: the hook's error itself
        run_local(
            FailingTrial,
            exp_conf=conf,
            max_length=Batch(4),
            checkpoint_period=Batch(2),
            async_checkpoints=False,
        )
    with pytest.raises(TypeError, match="async_checkpoints"):
        run_local(max_length=Batch(2), async_checkpoints="yes")


class Probe:
    """Put into the checkpoint by a callback's state_dict: pickling it takes 0.2 s and records
    the thread it ran on and how many batches the loop had trained by then."""

    seen: list[tuple[str, int]] = []
    batches = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> Probe:
        return Probe()

    def __reduce__(self) -> tuple[type, tuple[()]]:
        time.sleep(0.2)
        Probe.seen.append((threading.current_thread().name, Probe.batches))
        return (Probe, ())


class ProbeState(PyTorchCallback):  # overrides no checkpoint hook
    def state_dict(self) -> dict[str, Any]:
        return {"probe": Probe()}


class ProbeTrial(MLPTrial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        Probe.batches += 1
        return super().train_batch(batch, epoch_idx, batch_idx)

    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        return {"probe": ProbeState()}


def _fit_probe(**fit: Any) -> list[tuple[str, int]]:
    from determined import pytorch as det_torch

    Probe.seen, Probe.batches = [], 0
    with det_torch.init(hparams={"n": 40}) as ctx:
        trial = ProbeTrial(ctx)
        det_torch.Trainer(trial, ctx).fit(max_length=Batch(6), checkpoint_period=Batch(2), **fit)
    return Probe.seen


def test_the_default_is_asynchronous_without_checkpoint_hooks() -> None:
    """Unset (and no callback overriding a checkpoint hook): checkpoints are pickled on the
    writer thread while the loop trains on; async_checkpoints=False keeps them on the loop's
    thread, at the checkpoint's own step."""
    seen = _fit_probe()
    assert {thread for thread, _ in seen} == {"det-checkpoint-writer_0"}, seen
    assert seen[0][1] > 2  # the loop had moved past the step-2 checkpoint while it was written
    assert _fit_probe(async_checkpoints=False) == [
        ("MainThread", 2),
        ("MainThread", 4),
        ("MainThread", 6),
    ]


def test_a_state_too_large_to_stage_is_written_live_while_the_loop_waits(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Staging that would take more than its share of the available host memory copies
    nothing: the writer thread writes the live state and the loop waits for it (each
    checkpoint holds its own step's state), with a warning saying why."""
    from determined.pytorch import _staging

    monkeypatch.setattr(_staging, "MAX_SHARE_OF_AVAILABLE", 1e-12)
    with caplog.at_level("WARNING"):
        seen = _fit_probe(async_checkpoints=True)
    assert [batches for _, batches in seen] == [2, 4, 6]
    assert "written from the live state" in caplog.text
    staging = _staging.HostStaging()
    with pytest.raises(_staging.StagingTooLarge, match="MiB of new host memory"):
        staging.copy({"w": torch.ones(1000)})
    monkeypatch.setattr(_staging, "MAX_SHARE_OF_AVAILABLE", 0.5)
    copied, release = staging.copy({"w": torch.ones(1000)})  # not left marked in use
    assert torch.equal(copied["w"], torch.ones(1000))
    release()


KILL_SCRIPT = """
import os, pathlib, sys, time
sys.path.insert(0, {kit!r})
import torch
from _kit.pytorch_trials import MLPTrial, run_local
from determined.pytorch import Batch, PyTorchCallback

marker = pathlib.Path(sys.argv[1])

class Hang(PyTorchCallback):
    calls = 0
    def on_checkpoint_write_end(self, checkpoint_dir):
        Hang.calls += 1
        if Hang.calls == 2:  # the second checkpoint: files written, not yet committed
            marker.write_text(checkpoint_dir)
            time.sleep(600)

class T(MLPTrial):
    def build_callbacks(self):
        return {{**super().build_callbacks(), "hang": Hang()}}

torch.manual_seed(0)
run_local(T, hparams={{"n": 40}}, exp_conf={{"reproducibility": {{"experiment_seed": 7}}}},
          max_length=Batch(8), checkpoint_period=Batch(2), async_checkpoints=True)
"""


@pytest.mark.e2e
def test_kill_9_during_a_background_write_registers_nothing(tmp_path: pathlib.Path) -> None:
    """kill -9 while the second checkpoint is written in the background: only the first is
    committed (the second is an uncommitted staging directory that nothing lists), and a
    resume from the latest committed checkpoint continues at its batch."""
    kit = str(pathlib.Path(__file__).parents[1])
    script = tmp_path / "train.py"
    script.write_text(KILL_SCRIPT.format(kit=kit))
    marker = tmp_path / "writing"
    before = _committed()
    paths = [str(pathlib.Path.cwd()), kit, *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    proc = subprocess.Popen([sys.executable, str(script), str(marker)], env=env)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), "the second checkpoint's write never started"
        staging = pathlib.Path(marker.read_text())
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    new = _committed() - before
    assert len(new) == 1 and staging.name not in new
    assert staging.name.startswith(".")  # the staging name, never a checkpoint id
    (first,) = new
    assert '"batches_trained": 2' in (ckpt_dir(first) / "trial_state.json").read_text()
    trial, _, _ = run_local(hparams={"n": 40}, max_length=Batch(4), latest_checkpoint=first)
    assert [i for _, i in trial.events] == [2, 3]


def test_core_api_store_path_in_background(tmp_path: pathlib.Path) -> None:
    """Core API: store_path_in_background returns at once with a future; the write runs on
    another thread; wait_for_background returns the id, committed with its manifest; a failed
    write raises CheckpointFailed once, at the next call, with nothing stored."""
    from determined import core

    with core.init(checkpoint_storage=str(tmp_path)) as ctx:
        release = threading.Event()
        threads: list[str] = []

        def write(path: pathlib.Path) -> None:
            threads.append(threading.current_thread().name)
            release.wait(10)
            (path / "w.bin").write_bytes(b"x" * 10)

        future = ctx.checkpoint.store_path_in_background(write, {"steps_completed": 1})
        assert not future.done()
        release.set()
        storage_id = ctx.checkpoint.wait_for_background()
        assert storage_id == future.result() and threads != [threading.current_thread().name]
        assert (tmp_path / storage_id / "w.bin").read_bytes() == b"x" * 10
        with ctx.checkpoint.restore_path(storage_id) as path:  # verified against the manifest
            assert (path / "metadata.json").is_file()

        def broken(path: pathlib.Path) -> None:
            (path / "half").write_bytes(b"y")
            raise OSError("no space left (test)")

        ctx.checkpoint.store_path_in_background(broken, {})
        with pytest.raises(errors.CheckpointFailed, match="no space left"):
            ctx.checkpoint.store_path_in_background(write, {})
        assert ctx.checkpoint.wait_for_background() is None
        assert sorted(p.name for p in tmp_path.iterdir()) == [storage_id]


def _nested() -> Any:
    from hypothesis import strategies as st

    leaves = st.one_of(
        st.integers(),
        st.floats(allow_nan=False),
        st.text(max_size=3),
        st.none(),
        st.lists(st.floats(allow_nan=False, width=32), min_size=1, max_size=4).map(torch.tensor),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(st.text(max_size=3), inner, max_size=3),
        ),
        max_leaves=12,
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def _storages(obj: Any) -> list[int]:
    if isinstance(obj, torch.Tensor):
        return [obj.untyped_storage().data_ptr()] if obj.numel() else []
    if isinstance(obj, dict):
        return [p for v in obj.values() for p in _storages(v)]
    if isinstance(obj, list | tuple):
        return [p for v in obj for p in _storages(v)]
    return []


def test_host_copy_is_equal_and_shares_no_tensor_memory() -> None:
    """Property: staging (host_copy) gives an equal structure (same container types, equal
    tensors and values) whose tensors share no storage with the original, so training may
    change the original while the copy is written."""
    from hypothesis import given, settings

    from determined.pytorch._staging import host_copy

    @settings(max_examples=60, deadline=None)
    @given(_nested())
    def check(obj: Any) -> None:
        copied = host_copy(obj)
        assert _same(obj, copied)
        assert not set(_storages(obj)) & set(_storages(copied))

    check()


def test_core_close_waits_for_the_background_write_and_raises_its_failure(
    tmp_path: pathlib.Path,
) -> None:
    """core.Context.close() (and so leaving ``with core.init()``) waits for an outstanding
    background write, which is then committed; a failed one is raised by close(), after the
    rest of the context has been closed."""
    from determined import core

    done: list[int] = []

    def slow(path: pathlib.Path) -> None:
        time.sleep(0.3)
        (path / "a").write_bytes(b"1")
        done.append(1)

    with core.init(checkpoint_storage=str(tmp_path)) as ctx:
        ctx.checkpoint.store_path_in_background(slow, {})
    assert done == [1]
    [committed] = [p for p in tmp_path.iterdir()]
    assert (committed / "a").read_bytes() == b"1"

    def broken(path: pathlib.Path) -> None:
        raise OSError("bucket gone (test)")

    ctx = core.init(checkpoint_storage=str(tmp_path))
    ctx.checkpoint.store_path_in_background(broken, {})
    with pytest.raises(errors.CheckpointFailed, match="bucket gone"):
        ctx.close()
    assert ctx.distributed._closed
    assert [p.name for p in tmp_path.iterdir()] == [committed.name]


def test_interpreter_exit_without_close_still_commits_the_background_write(
    tmp_path: pathlib.Path,
) -> None:
    """A script that never closes its context: the writer thread is kept between checkpoints,
    and a normal interpreter exit waits for the write in progress, which is committed. The
    second write reuses the first one's thread."""
    script = f"""
import pathlib, threading, time
from determined import core
ctx = core.init(checkpoint_storage={str(tmp_path)!r})
threads = []
def write(path, value):
    threads.append(threading.current_thread().ident)
    time.sleep(0.2 * value)
    (path / "v").write_text(str(value))
ctx.checkpoint.store_path_in_background(lambda p: write(p, 1), {{}})
ctx.checkpoint.store_path_in_background(lambda p: write(p, 2), {{}})
assert threads[0] != threading.current_thread().ident
print("exiting", len(set(threads)), flush=True)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "exiting 1" in out.stdout
    values = sorted((p / "v").read_text() for p in tmp_path.iterdir() if p.is_dir())
    assert values == ["1", "2"]


def test_close_stops_the_writer_thread(tmp_path: pathlib.Path) -> None:
    from determined import core

    def writers() -> int:
        return sum(t.name.startswith("det-checkpoint-writer") for t in threading.enumerate())

    before = writers()
    ctx = core.init(checkpoint_storage=str(tmp_path))
    ctx.checkpoint.store_path_in_background(lambda p: (p / "a").write_bytes(b"1"), {})
    assert ctx.checkpoint.wait_for_background() is not None
    assert writers() == before + 1  # kept for the next checkpoint
    ctx.close()
    assert writers() == before


class PreemptedSlowWrite(PyTorchCallback):
    """The checkpoint the preemption asks for takes a while to write in the background."""

    def __init__(self) -> None:
        self.finished: list[float] = []

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        time.sleep(0.3)
        self.finished.append(time.monotonic())


class PreemptedTrial(MLPTrial):
    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        self.slow = PreemptedSlowWrite()
        return {**super().build_callbacks(), "slow": self.slow}

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        if batch_idx == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # local preemption signal (core)
        return super().train_batch(batch, epoch_idx, batch_idx)


def test_preemption_waits_for_the_background_write() -> None:
    """A preemption with async checkpoints: the final checkpoint is staged at the boundary
    and fit() returns STOPPED only once it is committed and announced
    (on_checkpoint_upload_end ran, the files are in place)."""
    from determined.pytorch import ExitReason

    trial, cap, _ = run_local(
        PreemptedTrial, reporting_period=Batch(5), max_length=Batch(20), async_checkpoints=True
    )
    assert trial.reason == ExitReason.STOPPED
    assert [i for _, i in trial.events] == [0, 1, 2, 3, 4]
    assert len(trial.slow.finished) == 1 and len(cap.uuids) == 1
    assert cap.uuids[0] in _committed()
    progress = (ckpt_dir(cap.uuids[0]) / "trial_state.json").read_text()
    assert '"batches_trained": 5' in progress


class SavedWeights(PyTorchCallback):
    """The weights each checkpoint was staged from, cloned when it started."""

    def __init__(self) -> None:
        self.at_save: list[list[torch.Tensor]] = []

    def on_checkpoint_save_start(self, checkpoint: dict[str, Any]) -> None:
        [model] = checkpoint["models_state_dict"]
        self.at_save.append([t.detach().cpu().clone() for t in model.values()])


class SavedWeightsTrial(MLPTrial):
    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        self.saved = SavedWeights()
        return {**super().build_callbacks(), "saved": self.saved}


def test_consecutive_async_checkpoints_each_hold_their_own_weights() -> None:
    """Staging reuses its host buffers from one checkpoint to the next: every checkpoint
    (batches 2, 4, 6, 7) still holds, bitwise, the weights it was staged from, and no two
    are equal (training changed the weights in between)."""
    trial, cap, _ = run_local(
        SavedWeightsTrial,
        hparams={"n": 40, "batch_size": 4, "lr": 0.05},
        max_length=Batch(7),
        checkpoint_period=Batch(2),
        async_checkpoints=True,
    )
    assert len(cap.uuids) == len(trial.saved.at_save) == 4
    stored = []
    for uuid, expected in zip(cap.uuids, trial.saved.at_save, strict=True):
        state = torch.load(ckpt_dir(uuid) / "state_dict.pth", weights_only=True)
        got = list(state["models_state_dict"][0].values())
        assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
        stored.append(got)
    for a, b in zip(stored, stored[1:], strict=False):
        assert not torch.equal(a[0], b[0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_async_resume_on_cuda_is_bitwise_equal_to_a_straight_run() -> None:
    """The bitwise-resume test with the model on the GPU: staged through pinned host
    buffers with asynchronous copies, written in the background, resumed on the GPU."""
    straight = _train(14, 14, async_first=False, async_resume=False)
    resumed = _train(8, 14, async_first=True, async_resume=True)
    assert all(p.is_cuda for p in resumed.model.parameters())
    for a, b in zip(params(straight.model), params(resumed.model), strict=True):
        assert torch.equal(a, b)
    sa, sb = straight.opt.state_dict()["state"], resumed.opt.state_dict()["state"]
    for key in sa:
        assert torch.equal(sa[key]["momentum_buffer"], sb[key]["momentum_buffer"])
