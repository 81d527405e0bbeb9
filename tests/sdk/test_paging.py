"""The SDK's paging helper (``_sdk._paging.read_paginated``) against a pager that answers as
the master's ``_wire.page`` does: every item once, in order, whatever the page size."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from determined.experimental._sdk import _paging


def _pager(items: list[int], page_size: int, calls: list[int]) -> Any:
    """The gateway's pagination of ``items``, ``page_size`` per page (0: all at once)."""

    def get(offset: int) -> dict[str, Any]:
        calls.append(offset)
        chunk = items[offset : offset + page_size] if page_size else items[offset:]
        start = min(offset, len(items))
        pagination = {"offset": offset, "startIndex": start, "endIndex": start + len(chunk)}
        return {"things": chunk, "pagination": {**pagination, "total": len(items)}}

    return get


@given(st.lists(st.integers(), max_size=60), st.integers(min_value=0, max_value=25))
def test_reads_every_item_once_in_order(items: list[int], page_size: int) -> None:
    calls: list[int] = []
    assert list(_paging.read_paginated(_pager(items, page_size, calls), "things")) == items
    # One request per page (an empty listing still asks once).
    pages = -(-len(items) // page_size) if page_size and items else 1
    assert len(calls) == pages
    assert calls == sorted(set(calls))


@given(st.lists(st.integers(), min_size=1, max_size=30), st.integers(min_value=1, max_value=10))
def test_single_reads_only_the_first_page(items: list[int], page_size: int) -> None:
    calls: list[int] = []
    got = list(_paging.read_paginated(_pager(items, page_size, calls), "things", single=True))
    assert got == items[:page_size] and calls == [0]


def test_a_response_without_pagination_is_one_page() -> None:
    assert list(_paging.read_paginated(lambda off: {"things": [1, 2]}, "things")) == [1, 2]


def test_pagination_that_does_not_advance_is_an_error() -> None:
    stuck = {"things": [1], "pagination": {"endIndex": 0, "total": 5}}
    with pytest.raises(ValueError, match="does not advance"):
        list(_paging.read_paginated(lambda off: stuck, "things"))
