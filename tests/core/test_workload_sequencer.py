"""determined.layers' workload sequencer (the legacy Trial API's loop plan, issue 14) against a
recording master: which workloads it yields for a config, and what it tells the master."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
from _kit.core_env import ALLOCATION_ID, EXPERIMENT_ID, TRIAL_ID, trial_config
from _kit.recording_master import RecordingMaster, Request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import determined as det
from determined import core, layers, workload

K = workload.Workload.Kind
T, V, C = "T", "V", "C"
SHORT = {K.RUN_STEP: T, K.COMPUTE_VALIDATION_METRICS: V, K.CHECKPOINT_MODEL: C}


def _ok(metric: float = 0.5) -> Callable[[workload.Workload], workload.Response]:
    def respond(w: workload.Workload) -> workload.Response:
        if w.kind == K.RUN_STEP:
            return {"metrics": det.util.make_metrics(None, [{"loss": metric}] * w.num_batches)}
        if w.kind == K.COMPUTE_VALIDATION_METRICS:
            return {"metrics": {"validation_metrics": {"loss": metric}}}
        return {}

    return respond


class Run:
    """One trial's sequencer against the recording master, with the given config changes."""

    def __init__(
        self,
        master: RecordingMaster,
        monkeypatch: pytest.MonkeyPatch,
        tmp_path: pathlib.Path,
        lengths: list[int],
        searcher: dict[str, Any] | None = None,
        best: float | None = None,
        last_validation: int | None = None,
        steps_completed: int = 0,
        **config: Any,
    ) -> None:
        conf = trial_config(tmp_path / "storage", **(searcher or {}))
        conf.update(config)
        monkeypatch.setenv("DET_EXPERIMENT_CONFIG", json.dumps(conf))
        monkeypatch.setenv("DET_HPARAMS", json.dumps({"global_batch_size": 32}))
        monkeypatch.setenv("DET_STEPS_COMPLETED", str(steps_completed))
        det._info._reset_cluster_info_cache()
        self.master = master
        self._first_request = len(master.requests)  # earlier runs of the test are not ours
        ops = iter(lengths)

        def next_op(req: Request, _m: object) -> tuple[int, dict[str, Any]]:
            length = next(ops, None)
            if length is None:
                return 200, {"completed": True}
            return 200, {"op": {"validateAfter": {"length": str(length)}}, "completed": False}

        master.route("GET", rf"/api/v1/trials/{TRIAL_ID}/searcher/operation", next_op)
        master.route("POST", r"/searcher/completed_operation", {})
        best_route = (
            rf"/api/v1/experiments/{EXPERIMENT_ID}/searcher/best_searcher_validation_metric"
        )
        if best is None:
            master.route("GET", best_route, (404, {"code": 5, "message": "no validations"}))
        else:
            master.route("GET", best_route, {"metric": best})
        latest = None if last_validation is None else {"totalBatches": last_validation}
        master.route("GET", rf"/api/v1/trials/{TRIAL_ID}", {"trial": {"latestValidation": latest}})

    def sequence(
        self,
        respond: Callable[[workload.Workload], workload.Response] | None = None,
        state: dict[str, Any] | None = None,
    ) -> list[tuple[str, int]]:
        """Iterate the sequencer, answering with ``respond``; returns (kind, batches done when
        the workload was issued, plus the step's batches for training)."""
        respond = respond or _ok()
        seen = []
        with core.init(
            preempt_mode=core.PreemptMode.ChiefOnly, tensorboard_mode=core.TensorboardMode.MANUAL
        ) as ctx:
            info = det.get_cluster_info()
            assert info is not None
            env = det.EnvContext._from_cluster_info(info)
            self.wlsq = layers.WorkloadSequencer(ctx, env, global_batch_size=32)
            if state is not None:
                self.wlsq.load_state(state)
            for w, send in self.wlsq:
                seen.append((SHORT[w.kind], w.total_batches_processed + w.num_batches))
                send(respond(w))
        return seen

    def bodies(self, method: str, path: str) -> list[Any]:
        mine = {id(r) for r in self.master.requests[self._first_request :]}
        return [r.body for r in self.master.find(method, path) if id(r) in mine]


@pytest.fixture
def run(
    cluster_trial: RecordingMaster, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> Callable[..., Run]:
    return lambda lengths, **kw: Run(cluster_trial, monkeypatch, tmp_path, lengths, **kw)


PERIODS = {
    "scheduling_unit": 5,
    "min_validation_period": {"batches": 10},
    "min_checkpoint_period": {"batches": 20},
}


def test_one_operation_interleaves_periods_and_ends_validated_and_checkpointed(
    run: Callable[..., Run],
) -> None:
    r = run([30], checkpoint_policy="none", **PERIODS)
    seen = r.sequence()
    assert seen == [
        (T, 5), (T, 10), (V, 10),
        (T, 15), (T, 20), (V, 20), (C, 20),
        (T, 25), (T, 30), (V, 30), (C, 30),
    ]  # fmt: skip
    # The searcher hears progress after each step and the result at the operation's length.
    assert r.bodies("POST", rf"/trials/{TRIAL_ID}/progress") == [
        {"progress": float(n)} for n in (5, 10, 15, 20, 25, 30)
    ]
    assert r.bodies("POST", r"/searcher/completed_operation") == [
        {"op": {"length": 30}, "searcherMetric": 0.5}
    ]
    assert r.wlsq.get_state() == {
        "trial_id": TRIAL_ID,
        "last_ckpt": 30,
        "steps_completed": 30,
        "step_id": 6,
        "last_val": 30,
    }


def test_best_policy_checkpoints_only_a_validation_better_than_the_experiments_best(
    run: Callable[..., Run],
) -> None:
    every10 = {"scheduling_unit": 10, "min_validation_period": {"batches": 10}}
    worse = run([20], checkpoint_policy="best", best=0.3, **every10)
    # 0.7 does not beat 0.3: no checkpoint follows a validation; the operation's end has one.
    assert worse.sequence(_ok(metric=0.7)) == [(T, 10), (V, 10), (T, 20), (V, 20), (C, 20)]
    better = run([20], checkpoint_policy="best", best=0.3, **every10)
    # 0.2 beats 0.3: a checkpoint follows each validation at once.
    assert better.sequence(_ok(metric=0.2)) == [
        (T, 10),
        (V, 10),
        (C, 10),
        (T, 20),
        (V, 20),
        (C, 20),
    ]
    # Larger is better: 0.7 beats 0.3.
    larger = run([10], searcher={"smaller_is_better": False}, checkpoint_policy="best", best=0.3,
                 **every10)  # fmt: skip
    assert larger.sequence(_ok(metric=0.7)) == [(T, 10), (V, 10), (C, 10)]


def test_all_policy_checkpoints_after_every_validation(run: Callable[..., Run]) -> None:
    r = run(
        [20], checkpoint_policy="all", scheduling_unit=10, min_validation_period={"batches": 10}
    )
    assert r.sequence() == [(T, 10), (V, 10), (C, 10), (T, 20), (V, 20), (C, 20)]


def test_several_operations_each_complete_at_their_length(run: Callable[..., Run]) -> None:
    r = run([10, 25], checkpoint_policy="none", scheduling_unit=100)
    assert r.sequence() == [(T, 10), (C, 10), (V, 10), (T, 25), (C, 25), (V, 25)]
    assert r.bodies("POST", r"/searcher/completed_operation") == [
        {"op": {"length": 10}, "searcherMetric": 0.5},
        {"op": {"length": 25}, "searcherMetric": 0.5},
    ]


def test_stop_requested_checkpoints_and_ends(run: Callable[..., Run]) -> None:
    r = run([30], checkpoint_policy="none", **PERIODS)

    def stop_at_15(w: workload.Workload) -> workload.Response:
        resp = _ok()(w)
        assert isinstance(resp, dict)
        if w.kind == K.RUN_STEP and w.total_batches_processed + w.num_batches == 15:
            resp["stop_requested"] = True
        return resp

    assert r.sequence(stop_at_15) == [(T, 5), (T, 10), (V, 10), (T, 15), (C, 15)]
    assert r.bodies("POST", r"/searcher/completed_operation") == []


def test_preemption_checkpoints_acknowledges_and_ends(run: Callable[..., Run]) -> None:
    r = run([30], checkpoint_policy="none", **PERIODS)
    r.master.route("GET", r"/api/v1/allocations/[^/]+/signals/preemption", {"preempt": True})
    assert r.sequence() == [(T, 5), (C, 5)]
    assert r.master.find("POST", rf"/allocations/{ALLOCATION_ID}/signals/ack_preemption")


def test_invalid_hp_reports_an_early_exit_without_a_checkpoint(run: Callable[..., Run]) -> None:
    r = run([30], checkpoint_policy="none", **PERIODS)
    assert r.sequence(lambda w: workload.InvalidHP()) == [(T, 5)]
    assert r.bodies("POST", rf"/trials/{TRIAL_ID}/early_exit") == [
        {"reason": "EXITED_REASON_INVALID_HP"}
    ]


def test_a_resumed_run_continues_from_the_checkpointed_state(run: Callable[..., Run]) -> None:
    first = run([30], checkpoint_policy="none", **PERIODS)

    def stop_at_15(w: workload.Workload) -> workload.Response:
        resp = _ok()(w)
        assert isinstance(resp, dict)
        resp["stop_requested"] = w.kind == K.RUN_STEP and w.total_batches_processed == 10
        return resp

    first.sequence(stop_at_15)
    state = first.wlsq.get_state()
    assert state["steps_completed"] == 15 and state["last_ckpt"] == 15 and state["last_val"] == 10
    second = run([30], checkpoint_policy="none", last_validation=10, steps_completed=15, **PERIODS)
    # Validation is due 10 batches after 10, a checkpoint 20 after 15 (never before the end).
    assert second.sequence(state=state) == [(T, 20), (V, 20), (T, 25), (T, 30), (V, 30), (C, 30)]
    # Another trial's state (a continued experiment) is ignored.
    third = run([10], checkpoint_policy="none", scheduling_unit=10)
    assert third.sequence(state={**state, "trial_id": TRIAL_ID + 1}) == [(T, 10), (C, 10), (V, 10)]


def test_without_saved_state_a_resumed_run_starts_at_its_checkpoint(
    run: Callable[..., Run],
) -> None:
    r = run([30], checkpoint_policy="none", steps_completed=20, last_validation=20, **PERIODS)
    assert r.sequence() == [(T, 25), (T, 30), (V, 30), (C, 30)]


def test_initial_validation_comes_first_on_a_fresh_trial(run: Callable[..., Run]) -> None:
    r = run([10], checkpoint_policy="none", perform_initial_validation=True, scheduling_unit=10)
    assert r.sequence() == [(V, 0), (T, 10), (C, 10), (V, 10)]


def test_lengths_in_records_and_epochs(run: Callable[..., Run]) -> None:
    records = run([320], searcher={"max_length": {"records": 320}}, scheduling_unit=100,
                  checkpoint_policy="none")  # fmt: skip
    assert records.sequence() == [(T, 10), (C, 10), (V, 10)]  # 320 records / 32 a batch
    assert records.bodies("POST", rf"/trials/{TRIAL_ID}/progress") == [{"progress": 320.0}]
    epochs = run([2], searcher={"max_length": {"epochs": 2}}, records_per_epoch=64,
                 scheduling_unit=100, checkpoint_policy="none")  # fmt: skip
    assert epochs.sequence() == [(T, 4), (C, 4), (V, 4)]
    assert epochs.bodies("POST", rf"/trials/{TRIAL_ID}/progress") == [{"progress": 2.0}]


def test_a_missing_searcher_metric_is_an_error_that_names_it(run: Callable[..., Run]) -> None:
    r = run([10], scheduling_unit=10)

    def no_loss(w: workload.Workload) -> workload.Response:
        if w.kind == K.COMPUTE_VALIDATION_METRICS:
            return {"metrics": {"validation_metrics": {"accuracy": 1.0}}}
        return _ok()(w)

    with pytest.raises(RuntimeError, match=r"'loss'.*\['accuracy'\]"):
        r.sequence(no_loss)


def test_a_controller_must_answer_each_workload_once() -> None:
    wkld = workload.train_workload(1, num_batches=2)
    for answers in (0, 2):
        gen = layers.yield_and_await_response(wkld)
        got, respond = next(gen)
        assert got == wkld
        for _ in range(answers):
            respond({})
        with pytest.raises(RuntimeError, match=f"once per workload; it called it {answers} times"):
            next(gen)
    gen = layers.yield_and_await_response(wkld)
    _, respond = next(gen)
    respond({"x": 1})
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value == {"x": 1}


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    length=st.integers(1, 60),
    unit=st.integers(1, 20),
    val=st.integers(0, 25),
    ckpt=st.integers(0, 25),
)
def test_any_plan_trains_exactly_the_length_in_bounded_steps(
    run: Callable[..., Run], length: int, unit: int, val: int, ckpt: int
) -> None:
    r = run(
        [length],
        checkpoint_policy="none",
        scheduling_unit=unit,
        min_validation_period={"batches": val},
        min_checkpoint_period={"batches": ckpt},
    )
    seen = r.sequence()
    steps = [b for kind, b in seen if kind == T]
    assert steps[-1] == length and steps == sorted(set(steps))
    sizes = [b - a for a, b in zip([0, *steps[:-1]], steps, strict=True)]
    assert all(1 <= s <= unit for s in sizes)
    # Every multiple of a period is a stop, validated / checkpointed there.
    if val:
        assert {b for kind, b in seen if kind == V} >= set(range(val, length + 1, val))
    if ckpt:
        assert {b for kind, b in seen if kind == C} >= set(range(ckpt, length + 1, ckpt))
    # It ends validated and checkpointed at the length, each once.
    assert seen.count((V, length)) == 1 and seen.count((C, length)) == 1
