"""determined/master/store/_engine.json_text: the JSON columns' encoder writes what
``json.dumps`` writes, read back the same, on a real store."""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from determined.master.store import Store, sqlite_url
from determined.master.store._engine import json_text

plain = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**80), 2**80),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=6),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plain)
def test_it_reads_back_as_json_dumps_does(value: Any) -> None:
    assert json.loads(json_text(value)) == json.loads(json.dumps(value))


def test_non_finite_floats_tuples_and_keys_as_json_dumps_writes_them() -> None:
    value = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, 1: (2, 3), False: 0}
    assert json_text(value) == json.dumps(value, separators=(",", ":"))
    assert json_text("é") == '"é"' and json.loads(json_text("é")) == "é"


def test_what_pydantic_cannot_encode_is_written_by_json_dumps() -> None:
    assert json_text({"s": "\ud800"}) == json.dumps({"s": "\ud800"})


def test_a_store_writes_and_reads_its_json_columns_with_it(tmp_path: pathlib.Path) -> None:
    store = Store(sqlite_url(tmp_path))
    try:
        assert store.engine.dialect._json_serializer is json_text  # type: ignore[attr-defined]
        value = {"loss": 0.25, "name": "é\ud800", "big": 2**70, "nan": "NaN", "l": [1, None]}
        with store.engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE j (v JSON)"))
            conn.execute(sa.insert(sa.table("j", sa.column("v", sa.JSON))), {"v": value})
            back = conn.execute(sa.select(sa.column("v", sa.JSON)).select_from(sa.table("j")))
            assert back.scalar_one() == value
    finally:
        store.close()
