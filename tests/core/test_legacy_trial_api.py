"""The legacy Trial API's pieces without a master (issue 14): the workload sequencer's plan and
the helpers 0.37 trial code imports, compared with Determined 0.37's own code run from
.refvenv; and the port of 0.37's no-op trial run locally in test mode."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest
from _kit.master import REPO

import determined as det
from determined import _execution, core, layers, tensorboard, workload
from determined.common import check
from determined.common import util as common_util
from determined.core import _searcher
from determined.exec._entrypoint import trial_class_from_entrypoint

REF_PY = REPO / ".refvenv" / "bin" / "python"
NOOP_DIR = REPO / "tests" / "fixtures" / "legacy_noop"

# (max_length in batches, config changes): plans both implementations must agree on.
PLAN_CASES: list[tuple[int, dict[str, Any]]] = [
    (30, {"scheduling_unit": 5, "min_validation_period": {"batches": 10},
          "min_checkpoint_period": {"batches": 20}}),
    (7, {"scheduling_unit": 3}),
    (12, {"scheduling_unit": 100, "min_validation_period": {"batches": 5}}),
    (9, {"scheduling_unit": 2, "min_checkpoint_period": {"batches": 4}, "checkpoint_policy": "all",
         "min_validation_period": {"batches": 3}}),
    (4, {"perform_initial_validation": True, "scheduling_unit": 2}),
    (64, {"scheduling_unit": 100, "min_validation_period": {"records": 320},
          "records_per_epoch": 640}),
]  # fmt: skip

# Runs in the reference's interpreter: its own WorkloadSequencer over its local Core API.
REF_PLANS = """
import json, sys
import determined as det
from determined import core, layers, workload
out = []
for length, changes in json.loads(sys.argv[1]):
    config = {"searcher": {"name": "single", "metric": "loss", "smaller_is_better": True,
              "max_length": {"batches": length}}, "checkpoint_policy": "none",
              "min_validation_period": {"batches": 0}, "min_checkpoint_period": {"batches": 0},
              **changes}
    core_context, env = det._make_local_execution_env(
        managed_training=True, test_mode=False, config=config, checkpoint_dir="/tmp",
        hparams={"global_batch_size": 32})
    env.det_trial_id = env.det_experiment_id = "1"
    core_context.searcher = core.DummySearcherContext(core_context.distributed, length)
    core_context.searcher.get_configured_units = lambda: core.Unit.BATCHES  # it says EPOCHS
    core_context.start()
    seq = layers.WorkloadSequencer(core_context, env, 32)
    plan = []
    for w, respond in seq:
        plan.append([w.kind.name, w.total_batches_processed + w.num_batches])
        if w.kind == workload.Workload.Kind.RUN_STEP:
            respond({"metrics": det.util.make_metrics(None, [{"loss": 1.0}] * w.num_batches)})
        elif w.kind == workload.Workload.Kind.COMPUTE_VALIDATION_METRICS:
            respond({"metrics": {"validation_metrics": {"loss": 1.0}}})
        else:
            respond({})
    out.append(plan)
print(json.dumps(out))
"""


def _reference(script: str, *args: str) -> Any:
    if not REF_PY.exists():
        pytest.skip("no .refvenv (scripts/setup.sh --tests creates it)")
    proc = subprocess.run(
        [str(REF_PY), "-I", "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/tmp",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _our_plan(length: int, changes: dict[str, Any], tmp_path: pathlib.Path) -> list[list[Any]]:
    config = {
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": length}},
        "checkpoint_policy": "none",
        **changes,
    }
    core_context, env = _execution._make_local_execution_env(
        managed_training=True,
        test_mode=False,
        config=config,
        checkpoint_dir=str(tmp_path),
        hparams={"global_batch_size": 32},
    )
    env.det_trial_id = env.det_experiment_id = "1"
    # The local Core API's single operation, in batches like the reference's run above.
    core_context.searcher = _searcher.SearcherContext(
        _searcher._LocalOps(length), core_context.distributed, core.Unit.BATCHES
    )
    plan = []
    with core_context:
        for w, respond in layers.WorkloadSequencer(core_context, env, 32):
            plan.append([w.kind.name, w.total_batches_processed + w.num_batches])
            if w.kind == workload.Workload.Kind.RUN_STEP:
                respond({"metrics": det.util.make_metrics(None, [{"loss": 1.0}] * w.num_batches)})
            elif w.kind == workload.Workload.Kind.COMPUTE_VALIDATION_METRICS:
                respond({"metrics": {"validation_metrics": {"loss": 1.0}}})
            else:
                respond({})
    return plan


def test_the_sequencer_plans_what_the_references_plans(tmp_path: pathlib.Path) -> None:
    want = _reference(REF_PLANS, json.dumps(PLAN_CASES))
    got = [_our_plan(length, changes, tmp_path) for length, changes in PLAN_CASES]
    assert got == want


REF_HELPERS = """
import json, pathlib
from determined import util, workload
from determined.tensorboard import util as tbu
from determined.common import check
metrics = util.make_metrics(64, [{"a": 1, "b": None, "c": [1]}, {"a": 3, "b": 2.0, "c": [2]}])
names = ["host.xplane.pb", "run/ip-1.trace.json.gz", "w.123.pt.trace.json", "w.pt.trace.json.gz",
         "events.out.tfevents.1.host", "plain.txt"]
paths = [str(tbu.get_rank_aware_path(pathlib.Path(n), 3)) for n in names]
cases = [(32, 3), (8, 1), (5, 0)]
sizes = [util.calculate_batch_sizes({"global_batch_size": g}, s, "T") for g, s in cases]
w = workload.train_workload(4, 2, 3, num_batches=7, total_batches_processed=21)
def fails(fn, *a):
    try:
        fn(*a)
    except check.CheckFailedError:
        return True
    return False
checks = [fails(check.gt, 1, 2), fails(check.gt_eq, 2, 2), fails(check.is_in, "x", {"y": 1}),
          fails(check.is_type, True, int), fails(check.check_len, [1], 1), fails(check.lt, 3, 2)]
print(json.dumps({"metrics": metrics, "paths": paths, "sizes": sizes, "repr": repr(w),
                  "checks": checks, "legacy": [util.match_legacy_trial_class(e) for e in
                  ["model_def:Trial", "a.b:C", "python3 train.py", "a:b:c"]]}))
"""


def test_helpers_behave_as_the_references() -> None:
    want = _reference(REF_HELPERS)
    metrics = det.util.make_metrics(
        64, [{"a": 1, "b": None, "c": [1]}, {"a": 3, "b": 2.0, "c": [2]}]
    )
    assert json.loads(json.dumps(metrics)) == want["metrics"]
    names = ["host.xplane.pb", "run/ip-1.trace.json.gz", "w.123.pt.trace.json",
             "w.pt.trace.json.gz", "events.out.tfevents.1.host", "plain.txt"]  # fmt: skip
    paths = [str(tensorboard.util.get_rank_aware_path(pathlib.Path(n), 3)) for n in names]
    assert paths == want["paths"]
    sizes = [det.util.calculate_batch_sizes({"global_batch_size": g}, s, "T")
             for g, s in [(32, 3), (8, 1), (5, 0)]]  # fmt: skip
    assert [list(s) for s in sizes] == want["sizes"]
    w = workload.train_workload(4, 2, 3, num_batches=7, total_batches_processed=21)
    assert repr(w) == want["repr"]

    def fails(fn: Any, *a: Any) -> bool:
        try:
            fn(*a)
        except check.CheckFailedError:
            return True
        return False

    checks = [fails(check.gt, 1, 2), fails(check.gt_eq, 2, 2), fails(check.is_in, "x", {"y": 1}),
              fails(check.is_type, True, int), fails(check.check_len, [1], 1),
              fails(check.lt, 3, 2)]  # fmt: skip
    assert checks == want["checks"]
    legacy = ["model_def:Trial", "a.b:C", "python3 train.py", "a:b:c"]
    assert [det.util.match_legacy_trial_class(e) for e in legacy] == want["legacy"]


def test_check_messages_say_what_was_found_and_why() -> None:
    with pytest.raises(check.CheckFailedError, match=r"CHECK FAILED! 1 <= 2: too small"):
        check.gt(1, 2, "too small")
    with pytest.raises(check.CheckFailedError, match=r"'x' is not in \['y'\]"):
        check.check_in("x", {"y": 1})


def test_batch_sizes_refuse_what_cannot_work() -> None:
    for hparams, fix in [
        ({}, "add an integer `global_batch_size`"),
        ({"global_batch_size": 3.0}, "must be an integer, not float"),
        ({"global_batch_size": 2}, r"at least the number of slots \(4\)"),
    ]:
        with pytest.raises(det.errors.InvalidExperimentException, match=fix):
            det.util.calculate_batch_sizes(hparams, 4, "NoOpTrial")


def test_workload_json_round_trips() -> None:
    for w in (
        workload.train_workload(3, 1, 2, num_batches=5, total_batches_processed=10),
        workload.validation_workload(3, 1, 2, 15),
        workload.checkpoint_workload(3, 1, 2, 15),
    ):
        assert workload.Workload.from_json(json.loads(json.dumps(w.__json__()))) == w
    with pytest.raises(check.CheckFailedError):
        workload.Workload.from_json({**workload.train_workload(1).__json__(), "kind": "NOPE"})


def test_yaml_helpers_use_ruamel_and_round_trip() -> None:
    data = {"a": [1, 2], "b": {"c": "d"}}
    text = common_util.yaml_safe_dump(data)
    assert common_util.yaml_safe_load(text) == data
    with pytest.raises(ValueError, match="does not parse"):
        common_util.safe_load_yaml_with_exceptions("a: [1\n")
    assert list(common_util.chunks("ABCDEFG", 3)) == ["ABC", "DEF", "G"]
    assert common_util.sizeof_fmt(1536) == "1.5KB"
    assert [common_util.strtobool(v) for v in ("no", "0", "", "yes", "x")] == [
        False, False, False, True, True
    ]  # fmt: skip


def test_experiment_config_accessors_default_like_a_filled_config() -> None:
    config = det.ExperimentConfig({"searcher": {"metric": "loss"}, "records_per_epoch": 100})
    assert config.scheduling_unit() == 100
    assert config.slots_per_trial() == 1
    assert config.get_searcher_metric() == "loss"
    assert config.get_records_per_epoch() == 100
    assert config.get_min_validation_period() == {}
    with pytest.raises(ValueError, match="entrypoint"):
        config.get_entrypoint()


def test_noop_trial_runs_one_batch_locally(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_HOME", str(tmp_path))
    monkeypatch.chdir(NOOP_DIR)
    trial_class = trial_class_from_entrypoint("model_def:NoOpTrial", str(NOOP_DIR))
    config = {
        "hyperparameters": {"global_batch_size": 4, "metrics_base": {"type": "double",
                            "minval": 0.5, "maxval": 0.6}},
        "searcher": {"name": "single", "metric": "validation_error", "max_length": {"batches": 3}},
    }  # fmt: skip
    controller = _execution.test_one_batch(trial_class, config)
    assert controller.steps_trained() == 1
    assert 0.5 <= controller.metrics_base <= 0.6  # sampled from the hyperparameter's range
    assert controller.is_chief and controller.workloads is not None


def test_trial_context_from_config_and_its_errors() -> None:
    class Plain(det.LegacyTrial):
        def __init__(self, context: det.TrialContext) -> None:
            self.context = context

    context = det.TrialContext.from_config({"hyperparameters": {"lr": {"type": "const", "val": 2}}})
    try:
        trial = Plain(context)
        assert trial.context.get_hparam("lr") == 2
        assert context.get_hparams() == {"lr": 2}
        assert context.get_data_config() == {}
        with pytest.raises(ValueError, match=r"no hyperparameter 'lr2'.*defined: \['lr'\]"):
            context.get_hparam("lr2")
        with pytest.raises(TypeError, match="must be a bool"):
            context.set_stop_requested("yes")  # type: ignore[arg-type]
        context.set_stop_requested(True)
        assert context.get_stop_requested()
    finally:
        context._core.close()
    with pytest.raises(TypeError, match="has no trial_controller_class"):
        _execution.test_one_batch(Plain, {})
    with pytest.raises(TypeError, match="abstract"):
        det.LegacyTrial(context)  # type: ignore[abstract]


def test_pytorch_trial_names_its_controller() -> None:
    from determined import pytorch

    assert issubclass(pytorch.PyTorchTrial.trial_controller_class, det.TrialController)
    assert pytorch.PyTorchTrial.trial_context_class is pytorch.PyTorchTrialContext
    assert sys.modules["determined.pytorch"] is pytorch


def test_experimental_test_one_batch_trains_a_pytorch_trial_one_batch(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``determined.experimental.test_one_batch`` (0.37's): a PyTorchTrial trains exactly one
    batch (and validates) locally, with hyperparameters drawn from the config."""
    from _kit.pytorch_trials import MLPTrial

    from determined import experimental

    monkeypatch.chdir(tmp_path)
    seen: list[Any] = []

    class Counting(MLPTrial):
        def __init__(self, context: Any) -> None:
            super().__init__(context, events=seen)

    config = {
        "hyperparameters": {"lr": {"type": "double", "minval": 0.001, "maxval": 0.1}, "n": 8},
        "searcher": {"name": "single", "metric": "val_loss", "max_length": 1},
    }
    assert experimental.test_one_batch(Counting, config) is None
    assert seen == [(0, 0)]
