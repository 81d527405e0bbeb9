"""Presto tables, times and percentages as the reference prints them; config overrides; the
model-definition file list with .detignore."""

from __future__ import annotations

import base64
import io
import pathlib
import tarfile

import pytest

from determined.cli import _context, _create, _render


def test_presto_table_layout() -> None:
    out = io.StringIO()
    _render.table(["ID", "Name", "H-Params"], [[1, "a", "{\n  x\n}"], [12, None, "y"]], out=out)
    assert out.getvalue().splitlines() == [
        " ID | Name | H-Params",
        "----+------+----------",
        "  1 | a    | {",
        "    |      |   x",
        "    |      | }",
        " 12 |      | y",
    ]


def test_csv_table() -> None:
    out = io.StringIO()
    _render.table(["a", "b"], [[1, None]], as_csv=True, out=out)
    assert out.getvalue().splitlines() == ["a,b", "1,"]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("2024-05-01T12:00:00Z", "2024-05-01 12:00:00+0000"),
        ("2024-05-01T12:00:00.123456789Z", "2024-05-01 12:00:00+0000"),
        ("2024-05-01T14:00:00+02:00", "2024-05-01 12:00:00+0000"),
        (None, None),
    ],
)
def test_format_time(given: str | None, expected: str | None) -> None:
    assert _render.format_time(given) == expected


def test_format_percent_and_state() -> None:
    assert _render.format_percent(0.125) == "12.5%"
    assert _render.format_percent(None) is None
    assert _render.strip_state("STATE_STOPPING_CANCELED") == "STOPPING_CANCELED"


def test_config_overrides() -> None:
    config = {"searcher": {"name": "single", "max_length": 10}, "slurm": None}
    _create.apply_overrides(
        config,
        [
            "searcher.max_length=20",
            "hyperparameters.lr=0.5",
            "labels=a,b",
            "resources={slots_per_trial: 2}",
            "bind_mounts={host_path: /x, container_path: /y}",
            "slurm.sbatch_args=[--mem=1g]",
        ],
    )
    assert config["searcher"] == {"name": "single", "max_length": 20}
    assert config["hyperparameters"] == {"lr": 0.5}
    assert config["labels"] == ["a", "b"]
    assert config["resources"] == {"slots_per_trial": 2}
    assert config["bind_mounts"] == [{"host_path": "/x", "container_path": "/y"}]
    assert config["slurm"] == {"sbatch_args": ["--mem=1g"]}
    with pytest.raises(_render.CliError, match="key=value"):
        _create.apply_overrides({}, ["nonsense"])
    with pytest.raises(_render.CliError, match="not a mapping"):
        _create.apply_overrides({"name": "x"}, ["name.sub=1"])


def test_context_honours_detignore(tmp_path: pathlib.Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "m.pyc").write_bytes(b"\0")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "t.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "big.bin").write_bytes(b"x" * 100)
    (tmp_path / "notes.log").write_text("log\n")
    (tmp_path / ".detignore").write_text("# comment\ndata/\n*.log\n")
    files = _context.read_context(tmp_path)
    by_path = {f["path"]: f for f in files}
    assert sorted(by_path) == ["pkg", "pkg/m.py", "train.py"]
    assert by_path["pkg"]["type"] == ord(tarfile.DIRTYPE)
    assert by_path["train.py"]["type"] == ord(tarfile.REGTYPE)
    assert base64.b64decode(by_path["train.py"]["content"]) == b"print(1)\n"
    assert by_path["train.py"]["mtime"].isdigit()


def test_context_rejects_a_file(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "train.py"
    f.write_text("")
    with pytest.raises(_render.CliError, match="must be a directory"):
        _context.read_context(f)
    assert _context.read_context(None) == []
