"""``det preview-search``: determined/cli/_preview.py, run in-process (it needs no master). It
runs the master's search code as a process (``python -m determined.master.searcher``): e2e."""

from __future__ import annotations

import json
import pathlib

import pytest

from determined.cli._main import main

pytestmark = pytest.mark.e2e

ADAPTIVE = """
name: preview
entrypoint: python3 train.py
reproducibility: {experiment_seed: 3}
searcher:
  name: adaptive_asha
  metric: loss
  max_length: {batches: 1000}
  max_trials: 16
  divisor: 4
  mode: standard
  max_concurrent_trials: 16
hyperparameters:
  lr: {type: log, minval: -4, maxval: -1, base: 10}
"""


def _write(tmp_path: pathlib.Path, text: str) -> str:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return str(path)


def test_text_shows_each_bracket_and_what_its_rungs_train(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["preview-search", _write(tmp_path, ADAPTIVE)]) == 0
    out = capsys.readouterr().out
    assert "Using search configuration:" in out and "name: adaptive_asha" in out
    assert "This search will create a total of 16 trial(s)." in out
    # docs/reference/master.md §1.7 worked example: brackets of 12 and 4 trials, rungs 62/250/1000
    # and 250/1000
    assert "Bracket 1: 12 trial(s); rungs at 62, 250, 1000 batches" in out
    assert "Bracket 2: 4 trial(s); rungs at 250, 1000 batches" in out
    groups = [line.split(" x train to ") for line in out.splitlines() if " x train to " in line]
    assert sum(int(n) for n, _ in groups) == 16
    assert any(steps == "62 -> 250 -> 1000 batches" for _, steps in groups)


def test_json_is_the_preview_and_the_seed_decides(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _write(tmp_path, ADAPTIVE)
    assert main(["preview-search", cfg, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["preview-search", cfg, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == first  # deterministic
    assert first["seed"] == 3 and first["total_trials"] == 16
    assert [b["rung_lengths"] for b in first["brackets"]] == [[62, 250, 1000], [250, 1000]]
    assert sum(t["occurrences"] for t in first["trials"] if t["bracket"] == 0) == 12
    assert main(["preview-search", cfg, "--json", "--seed", "4"]) == 0
    assert json.loads(capsys.readouterr().out)["seed"] == 4


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("entrypoint: x\n", "must have 'searcher' section"),
        ("searcher: {name: grid, metric: m, max_length: 5, max_trials: 2}\n", "max_trials"),
        ("searcher: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_configs_say_what_is_wrong(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], text: str, needle: str
) -> None:
    assert main(["preview-search", _write(tmp_path, text)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("det: ") and needle in err
