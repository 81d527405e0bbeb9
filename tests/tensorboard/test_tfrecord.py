"""determined/tensorboard/_tfrecord.py: the numpy CRC-32C and record framing agree with the
tensorboard package's pure-Python ones, byte for byte."""

from __future__ import annotations

import pathlib
import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
from tensorboard.summary.writer.record_writer import RecordWriter

from determined.tensorboard import _tfrecord


def test_known_crc32c_check_value() -> None:
    # The standard check value of CRC-32C (Castagnoli) for "123456789".
    assert _tfrecord.crc32c_many([b"123456789"]) == [0xE3069283]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=80), max_size=20))
def test_masked_crcs_match_tensorboard(items: list[bytes]) -> None:
    got = [_tfrecord.mask(c) for c in _tfrecord.crc32c_many(items)]
    assert got == [masked_crc32c(item) for item in items]


def test_frame_matches_tensorboards_record_writer(tmp_path: pathlib.Path) -> None:
    records = [b"", b"a", b"event-bytes" * 3, bytes(range(256)), b"a"]
    path = tmp_path / "ref"
    with open(path, "wb") as f:
        writer = RecordWriter(f)
        for r in records:
            writer.write(r)
    assert _tfrecord.frame(records) == path.read_bytes()
    assert _tfrecord.frame(records)[:8] == struct.pack("<Q", 0)


def test_writer_files_do_not_collide_with_a_summary_writer(tmp_path: pathlib.Path) -> None:
    """Our writer and a SummaryWriter in one directory within one second get distinct files."""
    from torch.utils.tensorboard import SummaryWriter

    from determined import tensorboard

    ours = tensorboard.get_metric_writer(tmp_path)
    ours.on_train_step_end(1, {"loss": 1.0})
    theirs = SummaryWriter(str(tmp_path))
    theirs.add_scalar("user/x", 2.0, 1)
    theirs.close()
    ours.on_train_step_end(2, {"loss": 0.5})
    ours.close()
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 2


@settings(max_examples=100, deadline=None)
@given(
    tag=st.text(max_size=40),
    value=st.floats(allow_nan=False),
    step=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    wall_time=st.floats(min_value=0, max_value=4e9),
)
def test_scalar_event_parses_as_the_protobuf_event(
    tag: str, value: float, step: int, wall_time: float
) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2

    parsed = event_pb2.Event.FromString(_tfrecord.scalar_event(tag, value, step, wall_time))
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
    expected = event_pb2.Event(wall_time=wall_time, step=step, summary=summary)
    assert parsed == expected


def test_file_version_event_parses_as_the_protobuf_event() -> None:
    from tensorboard.compat.proto import event_pb2

    parsed = event_pb2.Event.FromString(_tfrecord.file_version_event(1234.5))
    assert parsed == event_pb2.Event(wall_time=1234.5, file_version="brain.Event:2")


@settings(max_examples=200, deadline=None)
@given(
    tag=st.text(max_size=40),
    points=st.lists(
        st.tuples(
            st.floats(allow_nan=False) | st.integers(-(2**40), 2**40) | st.booleans(),
            st.integers(min_value=-5, max_value=2**63 - 1)
            | st.integers(min_value=0, max_value=2**15),
        ),
        max_size=40,
    ),
    wall_time=st.floats(min_value=0, max_value=4e9),
    per_value_walls=st.booleans(),
)
def test_scalar_series_is_the_framed_events_one_by_one(
    tag: str, points: list[tuple[float, int]], wall_time: float, per_value_walls: bool
) -> None:
    """The array encoding of a report's per-batch metrics is byte for byte the events encoded
    and framed one at a time: mixed varint widths, negative steps, values beyond float32, one
    wall time for all or one each."""
    values, steps = [v for v, _ in points], [s for _, s in points]
    walls = [wall_time + i / 3 for i in range(len(points))] if per_value_walls else None
    one_by_one = [
        _tfrecord.scalar_event(tag, float(v), s, walls[i] if walls else wall_time)
        for i, (v, s) in enumerate(points)
    ]
    got = _tfrecord.scalar_series(tag, values, steps, walls if walls is not None else wall_time)
    assert got == _tfrecord.frame(one_by_one)


def test_scalar_series_of_consecutive_steps_across_varint_widths() -> None:
    steps = list(range(100, 16_500))  # 1-, 2- and 3-byte step varints, in order
    values = [s / 7 for s in steps]
    one_by_one = [
        _tfrecord.scalar_event("Determined/loss", v, s, 5.0)
        for v, s in zip(values, steps, strict=True)
    ]
    assert _tfrecord.scalar_series("Determined/loss", values, steps, 5.0) == _tfrecord.frame(
        one_by_one
    )
