"""Reading every page of a paginated listing (``offset``/``limit`` with the gateway's
``pagination`` object), as 0.37's ``api.read_paginated`` does."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

Page = dict[str, Any]


def read_paginated(
    get_page: Callable[[int], Page], key: str, *, single: bool = False, start: int = 0
) -> Iterator[Any]:
    """Yield the items under ``key`` of every page, asking for ``get_page(offset)`` from
    ``start`` (the SDK and the CLI's ``--offset``, 0.37's ``det`` pager too).

    The next offset is the page's ``pagination.endIndex``; the listing ends when that reaches
    ``pagination.total``, when a page is empty, or (without a ``pagination`` object: a master
    that does not page) after the first page. ``single`` stops after the first page too (a
    caller that set a limit).

    Raises:
        ValueError: a page whose ``endIndex`` does not move past its offset while items remain
            (a master that would make this loop forever).
    """
    offset = start
    while True:
        page = get_page(offset)
        items = page.get(key) or []
        yield from items
        pagination = page.get("pagination")
        if single or not items or not isinstance(pagination, dict):
            return
        total = int(pagination.get("total") or 0)
        end_index = pagination.get("endIndex")
        end = offset + len(items) if end_index is None else int(end_index)
        if end >= total:
            return
        if end <= offset:
            raise ValueError(
                f"a page of {key!r} at offset {offset} ended at {end} of {total}: the master's "
                "pagination does not advance"
            )
        offset = end
