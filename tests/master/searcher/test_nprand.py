"""The searcher RNG reproduces NumPy's legacy RandomState (and so the reference master)."""

from __future__ import annotations

import json
import uuid

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from determined.master.searcher import NpRand


def test_matches_reference_vectors() -> None:
    # The reference's own vectors: RandomState(42).randint(0, 10), RandomState(999)...
    r = NpRand(42)
    assert [r.intn(10) for _ in range(12)] == [6, 3, 7, 4, 6, 9, 2, 6, 7, 4, 3, 7]
    r = NpRand(999)
    assert [r.intn(1 << 31) for _ in range(3)] == [1303213504, 648491356, 118207333]
    r = NpRand(999)
    assert r.intn((1 << 60) - 10) == 985573361606668636
    r = NpRand(1)
    assert [r.uniform(0, 1) for _ in range(2)] == [0.417022004702574, 0.7203244934421581]


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 2**40))
def test_bounded_ints_and_floats_match_numpy(seed: int, n: int) -> None:
    ours, theirs = NpRand(seed), np.random.RandomState(seed)
    for _ in range(5):
        assert ours.intn(n) == int(theirs.randint(0, n))
        assert ours.uniform(-3.0, 5.0) == theirs.uniform(-3.0, 5.0)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 700))
def test_state_round_trips_through_json(seed: int, draws: int) -> None:
    r = NpRand(seed)
    for _ in range(draws):
        r.bits32()
    copy = NpRand.from_state(json.loads(json.dumps(r.state())))
    assert [copy.bits32() for _ in range(700)] == [r.bits32() for _ in range(700)]


def test_request_ids_are_uuid4_from_four_little_endian_draws() -> None:
    r, raw = NpRand(5), NpRand(5)
    rid = uuid.UUID(r.request_id())
    assert rid.version == 4 and rid.variant == uuid.RFC_4122
    data = b"".join(raw.bits32().to_bytes(4, "little") for _ in range(4))
    assert rid.bytes[:6] == data[:6] and rid.bytes[9:] == data[9:]


def test_intn_rejects_empty_range() -> None:
    try:
        NpRand(0).intn(0)
    except ValueError as e:
        assert "n >= 1" in str(e)
    else:
        raise AssertionError("intn(0) must fail")
