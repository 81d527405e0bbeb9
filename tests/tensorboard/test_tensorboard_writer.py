"""determined/tensorboard/_writer.py: AUTO-mode metrics written as real tfevents files, read
back with TensorBoard's own EventAccumulator."""

from __future__ import annotations

import math
import pathlib
import tempfile
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.backend.event_processing import event_accumulator

from determined import tensorboard

Points = dict[str, list[tuple[int, float]]]


def read_scalars(log_dir: pathlib.Path) -> Points:
    """Every scalar in every event file under ``log_dir``: tag -> [(step, value)] by step."""
    acc = event_accumulator.EventAccumulator(
        str(log_dir), size_guidance={event_accumulator.SCALARS: 0}, purge_orphaned_data=False
    )
    acc.Reload()
    return {
        tag: sorted((e.step, e.value) for e in acc.Scalars(tag)) for tag in acc.Tags()["scalars"]
    }


def event_files(log_dir: pathlib.Path) -> list[pathlib.Path]:
    return sorted(log_dir.glob("events.out.tfevents.*"))


def as_float32(x: Any) -> float:
    return float(np.float32(x))


def test_training_tags_and_steps(tmp_path: pathlib.Path) -> None:
    w = tensorboard.get_metric_writer(tmp_path)
    w.on_train_step_end(10, {"loss": 0.5, "lr": 0.1})
    w.on_train_step_end(20, {"loss": 0.25, "lr": 0.01})
    w.close()
    assert read_scalars(tmp_path) == {
        "Determined/loss": [(10, 0.5), (20, 0.25)],
        "Determined/lr": [(10, as_float32(0.1)), (20, as_float32(0.01))],
    }


def test_batch_metrics_at_their_own_steps_and_averages_only_when_not_in_batches(
    tmp_path: pathlib.Path,
) -> None:
    w = tensorboard.get_metric_writer(tmp_path)
    batches = [{"loss": 4.0}, {"loss": 3.0}, {"loss": 2.0}, {"loss": 1.0}]
    # "loss" is covered by the batches, so its average (2.5) is not written; "acc" is.
    w.on_train_step_end(10, {"loss": 2.5, "acc": 0.75}, batch_metrics=batches)
    w.close()
    assert read_scalars(tmp_path) == {
        "Determined/loss": [(6, 4.0), (7, 3.0), (8, 2.0), (9, 1.0)],
        "Determined/acc": [(10, 0.75)],
    }


def test_validation_tags_without_double_val(tmp_path: pathlib.Path) -> None:
    w = tensorboard.get_metric_writer(tmp_path)
    w.on_validation_step_end(5, {"loss": 1.0, "val_acc": 0.5, "validation_error": 0.25})
    w.close()
    assert read_scalars(tmp_path) == {
        "Determined/val_loss": [(5, 1.0)],
        "Determined/val_acc": [(5, 0.5)],
        "Determined/validation_error": [(5, 0.25)],
    }


def test_only_numerical_scalars_are_written(tmp_path: pathlib.Path) -> None:
    w = tensorboard.get_metric_writer(tmp_path)
    metrics = {
        "int": 3,
        "flag": True,  # a bool is an int, as in the reference
        "f32": np.float32(1.5),
        "i64": np.int64(7),
        "zero_dim": np.array(2.5),
        "text": "hello",
        "none": None,
        "list": [1, 2],
        "vector": np.array([1.0, 2.0]),
        "np_bool": np.bool_(True),  # not an np.number: skipped, as in the reference
        "nested": {"a": 1},
        "bytes": b"x",
    }
    w.on_train_step_end(1, metrics)
    w.close()
    assert read_scalars(tmp_path) == {
        "Determined/int": [(1, 3.0)],
        "Determined/flag": [(1, 1.0)],
        "Determined/f32": [(1, 1.5)],
        "Determined/i64": [(1, 7.0)],
        "Determined/zero_dim": [(1, 2.5)],
    }


def test_nan_and_inf_are_written(tmp_path: pathlib.Path) -> None:
    w = tensorboard.get_metric_writer(tmp_path)
    w.on_train_step_end(1, {"a": float("nan"), "b": float("inf")})
    w.close()
    got = read_scalars(tmp_path)
    assert math.isnan(got["Determined/a"][0][1])
    assert got["Determined/b"] == [(1, math.inf)]


def test_the_first_report_is_written_at_once(tmp_path: pathlib.Path) -> None:
    w = tensorboard.get_metric_writer(tmp_path)
    w.on_train_step_end(1, {"loss": 1.0})
    assert read_scalars(tmp_path) == {"Determined/loss": [(1, 1.0)]}  # not closed yet
    w.close()


def test_training_reports_within_the_interval_wait_for_flush_validation_or_close(
    tmp_path: pathlib.Path,
) -> None:
    w = tensorboard.BatchMetricWriter(tensorboard.EventWriter(tmp_path), write_interval=3600)
    w.on_train_step_end(1, {"loss": 1.0})
    w.on_train_step_end(2, {"loss": 2.0}, [{"loss": 2.0}])
    assert read_scalars(tmp_path) == {"Determined/loss": [(1, 1.0)]}  # the second is buffered
    w.flush()
    assert read_scalars(tmp_path) == {"Determined/loss": [(1, 1.0), (1, 2.0)]}
    w.on_train_step_end(3, {"loss": 3.0})
    w.on_validation_step_end(3, {"loss": 0.5})  # validation writes both
    assert read_scalars(tmp_path) == {
        "Determined/loss": [(1, 1.0), (1, 2.0), (3, 3.0)],
        "Determined/val_loss": [(3, 0.5)],
    }
    w.on_train_step_end(4, {"loss": 4.0})
    w.close()
    assert read_scalars(tmp_path)["Determined/loss"][-1] == (4, 4.0)


def test_a_report_after_the_interval_writes_the_buffer_with_each_reports_wall_time(
    tmp_path: pathlib.Path,
) -> None:
    w = tensorboard.BatchMetricWriter(tensorboard.EventWriter(tmp_path), write_interval=0.3)
    w.on_train_step_end(1, {"loss": 1.0})
    t2 = time.time()
    w.on_train_step_end(2, {"loss": 2.0})
    time.sleep(0.35)
    t3 = time.time()
    w.on_train_step_end(3, {"loss": 3.0})  # a write_interval after the first write
    acc = event_accumulator.EventAccumulator(str(tmp_path), purge_orphaned_data=False)
    acc.Reload()
    events = {e.step: e.wall_time for e in acc.Scalars("Determined/loss")}
    assert sorted(events) == [1, 2, 3]
    assert events[2] == pytest.approx(t2, abs=0.05)  # its report's time, not the write's
    assert events[3] == pytest.approx(t3, abs=0.05)
    w.close()


def test_a_full_buffer_is_written_at_once(tmp_path: pathlib.Path) -> None:
    w = tensorboard.BatchMetricWriter(tensorboard.EventWriter(tmp_path), write_interval=3600)
    w.MAX_BUFFERED = 10
    w.on_train_step_end(1, {"loss": 1.0})
    w.on_train_step_end(11, {}, [{"loss": float(i)} for i in range(10)])
    assert len(read_scalars(tmp_path)["Determined/loss"]) == 11
    w.close()


def test_new_file_per_second_and_after_close(tmp_path: pathlib.Path) -> None:
    w = tensorboard.get_metric_writer(tmp_path)
    w.on_train_step_end(1, {"loss": 1.0})
    w.on_train_step_end(2, {"loss": 2.0})  # same second (almost surely): same file
    files_before = len(event_files(tmp_path))
    time.sleep(1.0 - time.time() % 1.0 + 0.01)  # into the next wall-clock second
    w.on_validation_step_end(3, {"loss": 3.0})
    w.close()
    w.on_train_step_end(4, {"loss": 4.0})  # after close: a new file, nothing lost
    w.close()
    assert files_before == 1
    assert len(event_files(tmp_path)) == 3
    assert read_scalars(tmp_path) == {
        "Determined/loss": [(1, 1.0), (2, 2.0), (4, 4.0)],
        "Determined/val_loss": [(3, 3.0)],
    }


def test_no_file_until_the_first_scalar(tmp_path: pathlib.Path) -> None:
    w = tensorboard.get_metric_writer(tmp_path / "tb")
    w.on_train_step_end(1, {"text": "only strings"})
    w.close()
    assert event_files(tmp_path / "tb") == []


names = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12)
numbers = st.one_of(
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False, width=32),
    st.booleans(),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    avg=st.dictionaries(names, numbers, max_size=5),
    batches=st.lists(st.dictionaries(names, numbers, max_size=3), max_size=4),
    val=st.dictionaries(names, st.one_of(numbers, st.text(max_size=3)), max_size=5),
    steps=st.integers(min_value=0, max_value=10**6),
)
def test_every_numeric_value_lands_once_at_its_tag_and_step(
    avg: dict[str, Any], batches: list[dict[str, Any]], val: dict[str, Any], steps: int
) -> None:
    steps += len(batches)
    expected: Points = {}

    def put(tag: str, step: int, value: Any) -> None:
        expected.setdefault("Determined/" + tag, []).append((step, as_float32(value)))

    for i, batch in enumerate(batches):
        for k, v in batch.items():
            put(k, steps - len(batches) + i, v)
    in_batches = {k for b in batches for k in b}
    for k, v in avg.items():
        if k not in in_batches:
            put(k, steps, v)
    for k, v in val.items():
        if not isinstance(v, str):
            put(k if k.startswith("val") else "val_" + k, steps + 1, v)

    with tempfile.TemporaryDirectory() as d:
        w = tensorboard.get_metric_writer(d)
        w.on_train_step_end(steps, avg, batch_metrics=batches or None)
        w.on_validation_step_end(steps + 1, val)
        w.close()
        got = read_scalars(pathlib.Path(d))
    assert got == {tag: sorted(points) for tag, points in expected.items()}


@pytest.mark.parametrize(
    "name, tag", [("loss", "val_loss"), ("val_loss", "val_loss"), ("valid", "valid")]
)
def test_validation_tag_name(name: str, tag: str) -> None:
    assert tensorboard.validation_tag_name(name) == tag
