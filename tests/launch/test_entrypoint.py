"""The module:Class loader of the harness (docs/reference/harness.md §16; §19 item 77)."""

from __future__ import annotations

import pathlib

import pytest

import determined as det
from determined.exec._entrypoint import trial_class_from_entrypoint

TRIAL_SRC = """
import determined as det

class Outer:
    class Inner(det.LegacyTrial):
        version = {version}

class MyTrial(det.LegacyTrial):
    version = {version}

class NotATrial:
    pass

not_a_class = 3
"""


def _write(tmp_path: pathlib.Path, version: int) -> None:
    (tmp_path / "model_def_e.py").write_text(TRIAL_SRC.format(version=version))


def test_loads_the_class_and_nested_names(tmp_path: pathlib.Path) -> None:
    _write(tmp_path, 1)
    cls = trial_class_from_entrypoint("model_def_e:MyTrial", str(tmp_path))
    assert issubclass(cls, det.LegacyTrial) and cls.__name__ == "MyTrial"
    inner = trial_class_from_entrypoint("model_def_e:Outer.Inner", str(tmp_path))
    assert inner.__qualname__ == "Outer.Inner"


def test_reimports_the_module_each_time(tmp_path: pathlib.Path) -> None:
    _write(tmp_path, 1)
    assert trial_class_from_entrypoint("model_def_e:MyTrial", str(tmp_path)).version == 1
    _write(tmp_path, 22)  # a different size: a same-second rewrite must not reuse the .pyc
    assert trial_class_from_entrypoint("model_def_e:MyTrial", str(tmp_path)).version == 22


@pytest.mark.parametrize(
    ("ep", "error", "match"),
    [
        ("model_def_e:NotATrial", TypeError, "not a trial class"),
        ("model_def_e:not_a_class", TypeError, "not a trial class"),
        ("model_def_e:Missing", ValueError, "has no 'Missing'; name a class defined in"),
        ("no_such_module_x:T", ValueError, "put no_such_module_x.py in the model definition"),
        ("model_def_e", ValueError, "module:Class"),
    ],
)
def test_bad_entrypoints(tmp_path: pathlib.Path, ep: str, error: type, match: str) -> None:
    _write(tmp_path, 1)
    with pytest.raises(error, match=match):
        trial_class_from_entrypoint(ep, str(tmp_path))


def test_an_import_error_inside_the_model_names_the_missing_package(tmp_path: pathlib.Path) -> None:
    (tmp_path / "model_def_f.py").write_text("import not_installed_pkg_q\n")
    with pytest.raises(ValueError, match="install 'not_installed_pkg_q' in the trial's"):
        trial_class_from_entrypoint("model_def_f:T", str(tmp_path))


def test_a_syntax_error_says_where(tmp_path: pathlib.Path) -> None:
    (tmp_path / "model_def_g.py").write_text("x = 1\ndef broken(:\n")
    with pytest.raises(ValueError, match=r"does not parse: .*\(model_def_g.py, line 2\)"):
        trial_class_from_entrypoint("model_def_g:T", str(tmp_path))
