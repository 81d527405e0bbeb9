"""merge_metadata / merge_resources: the reference's table (docs/reference/harness.md §19 item 20)
and properties."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from determined.core._checkpoint_merge import merge_metadata, merge_resources


@pytest.mark.parametrize(
    "a,b,merged,conflicts",
    [
        ({"a": 1}, {"b": 2}, {"a": 1, "b": 2}, {}),
        ({"a": 1}, {"a": 1}, {"a": 1}, {}),
        ({"a": [1]}, {"a": [2]}, None, {"/a": [0, 1]}),
        ({"a": [1]}, {"a": [1]}, {"a": [1]}, {}),
        ({"a": []}, {"a": 1}, None, {"/a": [0, 1]}),
        ({"a": []}, {"a": {"c": 1}}, None, {"/a": [0, 1]}),
        ({"a": {"c": 1}}, {"a": {"d": 1}}, {"a": {"c": 1, "d": 1}}, {}),
        ({"a": {"c": 1}}, {"a": 1}, None, {"/a": [0, 1]}),
        ({"a": {"b": {"c": 1}}}, {"a": {"b": {"c": 2}}}, None, {"/a/b/c": [0, 1]}),
    ],
)
def test_reference_table(
    a: dict[str, Any], b: dict[str, Any], merged: dict[str, Any] | None, conflicts: dict[str, Any]
) -> None:
    got, got_conflicts = merge_metadata([a, b])
    assert got_conflicts == conflicts
    if merged is not None:
        assert got == merged


def test_conflict_lists_every_rank_that_gave_the_key() -> None:
    _, conflicts = merge_metadata([{"x": 1}, {}, {"x": 1}, {"x": 2}])
    assert conflicts == {"/x": [0, 2, 3]}


def test_inputs_are_not_modified() -> None:
    a, b = {"n": {"x": 1}}, {"n": {"y": 2}}
    merged, _ = merge_metadata([a, b])
    assert merged == {"n": {"x": 1, "y": 2}}
    assert a == {"n": {"x": 1}} and b == {"n": {"y": 2}}


scalars = st.one_of(st.integers(-3, 3), st.text(max_size=2), st.booleans(), st.none())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=2), st.dictionaries(st.sampled_from("abc"), inner, max_size=3)
    ),
    max_leaves=6,
)
metadata = st.dictionaries(st.sampled_from("abcd"), values, max_size=4)


def leaves(d: Any, path: str = "") -> dict[str, Any]:
    if isinstance(d, dict) and d:
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(leaves(v, f"{path}/{k}"))
        return out
    return {path: d}


@settings(max_examples=150, deadline=None)
@given(st.lists(metadata, min_size=1, max_size=4))
def test_conflict_free_merges_keep_every_leaf(all_md: list[dict[str, Any]]) -> None:
    merged, conflicts = merge_metadata(all_md)
    if conflicts:
        return
    merged_leaves = leaves(merged)
    for md in all_md:
        for path, value in leaves(md).items():
            if path and value != {}:
                assert merged_leaves[path] == value


@settings(max_examples=150, deadline=None)
@given(st.lists(metadata, min_size=1, max_size=4))
def test_merging_a_rank_with_itself_never_conflicts(all_md: list[dict[str, Any]]) -> None:
    for md in all_md:
        merged, conflicts = merge_metadata([md, md])
        assert conflicts == {}
        assert merged == md


@settings(max_examples=150, deadline=None)
@given(metadata, metadata)
def test_conflicts_do_not_depend_on_rank_order(a: dict[str, Any], b: dict[str, Any]) -> None:
    m1, c1 = merge_metadata([a, b])
    m2, c2 = merge_metadata([b, a])
    assert set(c1) == set(c2)
    if not c1:
        assert m1 == m2


def test_merge_resources_directories_may_repeat_files_may_not() -> None:
    merged, conflicts = merge_resources(
        [
            {"d/": 0, "d/a": 1, "same": 3},
            {"d/": 0, "d/b": 2, "same": 3},
            {"same/": 0, "x": 1},
        ]
    )
    assert merged == {"d/": 0, "d/a": 1, "same": 3, "d/b": 2, "same/": 0, "x": 1}
    assert conflicts == {"same": [0, 1, 2]}


files = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d/", "d/e", "f/"]), st.integers(0, 5), max_size=4
)


@settings(max_examples=150, deadline=None)
@given(st.lists(files, min_size=1, max_size=4))
def test_merge_resources_conflicts_are_exactly_shared_file_names(
    all_res: list[dict[str, int]],
) -> None:
    merged, conflicts = merge_resources(all_res)
    assert set(merged) == {k for r in all_res for k in r}
    for name, ranks in conflicts.items():
        assert not name.endswith("/")
        assert ranks == [i for i, r in enumerate(all_res) if name in r or name + "/" in r]
        assert len(ranks) > 1
    for i, r in enumerate(all_res):
        for j, s in enumerate(all_res):
            for name in r:
                if i < j and not name.endswith("/") and (name in s or name + "/" in s):
                    assert name in conflicts
