"""The globs of ``det c rm --glob`` (storage/_globs.py): fnmatch's rules within a path segment,
``**`` across segments, and a named directory names what is in it."""

from __future__ import annotations

import fnmatch

from hypothesis import given
from hypothesis import strategies as st

from determined.common.storage._globs import matcher

names = st.text(alphabet="ab.-]![", min_size=1, max_size=6)
globs = st.lists(st.sampled_from(["a", "b", ".", "*", "?", "[ab]", "[!a]", "[]a]", "-", "!"]))


@given(names, globs.map("".join))
def test_one_segment_matches_as_fnmatch(name: str, glob: str) -> None:
    assert matcher([glob])(name) == (bool(glob) and fnmatch.fnmatchcase(name, glob))


segments = st.lists(st.text(alphabet="ab.", min_size=1, max_size=3), min_size=1, max_size=4)


@given(segments)
def test_double_star_names_everything_and_a_directory_its_contents(parts: list[str]) -> None:
    rel = "/".join(parts)
    assert matcher(["**/*"])(rel) and matcher(["**"])(rel + "/")
    assert matcher([parts[0]])(rel)  # the top directory (or the file itself)
    assert matcher(["**/" + parts[-1]])(rel)
    if len(parts) > 1:
        assert not matcher([parts[-1] + "x"])(rel)


def test_examples() -> None:
    top_pt = matcher(["*.pt"])
    assert top_pt("model.pt") and not top_pt("sub/model.pt") and not top_pt("sub/")
    any_pt = matcher(["**/*.pt"])
    assert any_pt("model.pt") and any_pt("a/b/model.pt") and not any_pt("a/model.txt")
    assert matcher(["opt"])("opt/state.pt") and not matcher(["opt"])("optimizer.pt")
    assert not matcher([])("x") and not matcher(["", "/"])("x")
