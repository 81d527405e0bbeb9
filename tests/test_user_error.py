"""The one-line cause of a failure (determined/_user_error.py) and the CLI's reading of it from
a trial's log (determined/cli/_logs.py CauseFinder)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import determined
from determined import _user_error
from determined.cli._logs import CauseFinder


def _raise_from_user_file(path: pathlib.Path, body: str) -> BaseException:
    path.write_text(body)
    code = compile(path.read_text(), str(path), "exec")
    try:
        exec(code, {"json": json})
    except Exception as e:
        return e
    raise AssertionError("the code did not raise")


def test_the_innermost_user_frame_is_named_not_the_library_below_it(
    tmp_path: pathlib.Path,
) -> None:
    user = tmp_path / "train.py"
    exc = _raise_from_user_file(user, "x = 1\ndef load():\n    return json.loads('{')\nload()\n")
    assert isinstance(exc, json.JSONDecodeError)
    text = _user_error.describe(exc)
    assert text.startswith("JSONDecodeError: Expecting property name enclosed in double quotes")
    assert text.endswith(f"(at {user}:3 in load)")


def test_a_path_below_the_working_directory_is_relative(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    exc = _raise_from_user_file(
        tmp_path / "model_def.py", "def f():\n    raise KeyError('lr')\nf()\n"
    )
    assert _user_error.describe(exc) == "KeyError: 'lr' (at model_def.py:2 in f)"


def test_an_import_error_wrapped_by_the_library_names_the_importing_line(
    tmp_path: pathlib.Path,
) -> None:
    # As the harness loads a trial class (python -c: no frame of this test file in the way).
    (tmp_path / "user_mod_zz.py").write_text("import os\nimport no_such_module_zz\n")
    script = (
        "from determined import _user_error\n"
        "from determined.exec._entrypoint import trial_class_from_entrypoint\n"
        "try:\n"
        "    trial_class_from_entrypoint('user_mod_zz:MyTrial')\n"
        "except ValueError as e:\n"
        "    print(_user_error.location(e))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "(at user_mod_zz.py:2 in <module>)", out.stderr


def test_a_syntax_error_names_its_file_and_line(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "model_def.py"
    bad.write_text("def f(:\n")
    with pytest.raises(SyntaxError) as info:
        compile(bad.read_text(), str(bad), "exec")
    assert _user_error.location(info.value) == f" (at {bad}:1 in <module>)"


def test_without_user_code_only_the_exception_is_named() -> None:
    try:
        json.loads("[")
    except ValueError as e:
        exc = e
    exc.__traceback__ = exc.__traceback__.tb_next  # type: ignore[union-attr]  # drop this file
    assert _user_error.location(exc) == ""
    assert _user_error.describe(ValueError()) == "ValueError"


def test_library_paths() -> None:
    assert _user_error.is_library_path("<frozen runpy>")
    assert _user_error.is_library_path(json.__file__)
    assert _user_error.is_library_path(determined.__file__)
    assert _user_error.is_library_path("/opt/venv/lib/python3.11/site-packages/torch/nn/x.py")
    assert not _user_error.is_library_path("/tmp/work/1.abc.1/model_def.py")


def _entries(*lines: str, error: int | None = None) -> Iterator[dict[str, Any]]:
    for i, line in enumerate(lines):
        level = "LOG_LEVEL_ERROR" if i == error else "LOG_LEVEL_INFO"
        yield {"log": line, "level": level}


TRACEBACK = [
    "starting",
    "Traceback (most recent call last):",
    '  File "/work/1.x.1/train.py", line 7, in <module>',
    "    main()",
    '  File "/usr/lib/python3/dist-packages/yaml/__init__.py", line 81, in load',
    "    ^^^^^^",
    "KeyError: 'lr'",
    "",
    "During handling of the above exception, another exception occurred:",
    "Traceback (most recent call last):",
    '  File "/work/1.x.1/other.py", line 1, in <module>',
    "RuntimeError: second",
]


def test_cause_finder_prefers_an_error_line() -> None:
    finder = CauseFinder()
    seen = list(finder.watch(_entries(*TRACEBACK, "ERROR: the cause", error=len(TRACEBACK))))
    assert len(seen) == len(TRACEBACK) + 1  # passes everything through
    assert finder.cause == "ERROR: the cause"


def test_cause_finder_falls_back_to_the_first_traceback() -> None:
    finder = CauseFinder()
    list(finder.watch(_entries(*TRACEBACK)))
    assert finder.cause == "KeyError: 'lr' (at /work/1.x.1/train.py:7 in <module>)"


def test_cause_finder_ignores_stdout_lines_inside_a_traceback() -> None:
    finder = CauseFinder()
    entries = list(_entries(*TRACEBACK[1:4], "start", *TRACEBACK[4:8]))
    entries[3]["stdtype"] = "stdout"  # "start", printed while the traceback was written
    list(finder.watch(iter(entries)))
    assert finder.cause == "KeyError: 'lr' (at /work/1.x.1/train.py:7 in <module>)"


def test_cause_finder_without_either_finds_nothing() -> None:
    finder = CauseFinder()
    list(finder.watch(_entries("hello", "Traceback (most recent call last):", '  File "x"')))
    assert finder.cause is None
