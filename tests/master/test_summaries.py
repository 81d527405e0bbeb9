"""determined/master/store/_metrics.py: summaries folded report by report equal summaries
rebuilt from scratch (the rollback path), for any sequence of values."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from determined.master.store._metrics import add_to_summary

values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.integers(-(10**6), 10**6),
    st.text(max_size=3),
    st.booleans(),
)
reports = st.lists(st.dictionaries(st.sampled_from(["a", "b", "c"]), values), max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reports)
def test_incremental_summary_matches_a_fold(seq: list[dict[str, object]]) -> None:
    summary: dict[str, object] = {}
    for report in seq:
        summary = add_to_summary(summary, report)
    for name in {k for r in seq for k in r}:
        seen = [r[name] for r in seq if name in r]
        entry = summary[name]
        assert isinstance(entry, dict)
        assert entry["last"] == seen[-1]
        tail_type = type(seen[-1])
        same_kind = []
        for v in reversed(seen):  # a change of type restarts the entry, as the fold does
            is_num = isinstance(v, (int, float)) and not isinstance(v, bool)
            last_num = tail_type in (int, float)
            if is_num != last_num or (not is_num and type(v) is not tail_type):
                break
            same_kind.append(v)
        assert entry["count"] == len(same_kind)
        if entry["type"] == "number":
            nums = [float(v) for v in same_kind]  # type: ignore[arg-type]
            assert entry["min"] == min(nums) and entry["max"] == max(nums)
            assert math.isclose(entry["sum"], sum(nums), rel_tol=1e-9, abs_tol=1e-6)


def test_an_entry_keeps_its_keys_in_order_and_restarts_on_a_change_of_kind() -> None:
    summary = add_to_summary({}, {"a": 2, "b": "x"})
    summary = add_to_summary(summary, {"a": 0.5, "b": "y"})
    assert list(summary["a"].items()) == [
        ("type", "number"),
        ("count", 2),
        ("sum", 2.5),
        ("min", 0.5),
        ("max", 2.0),
        ("mean", 1.25),
        ("last", 0.5),
    ]
    assert summary["b"] == {"type": "string", "count": 2, "last": "y"}
    summary = add_to_summary(summary, {"a": "text", "b": math.inf})
    assert summary["a"] == {"type": "string", "count": 1, "last": "text"}
    assert summary["b"] == {"type": "object", "count": 1, "last": math.inf}
    summary = add_to_summary(summary, {"a": -0.0})
    assert summary["a"] == {
        "type": "number",
        "count": 1,
        "sum": 0.0,
        "min": -0.0,
        "max": -0.0,
        "mean": 0.0,
        "last": -0.0,
    }
