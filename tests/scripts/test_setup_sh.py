"""scripts/setup.sh speaks and is a quick no-op the second time: run on a copy of the repo's
files with stand-ins for python3/pip (which log what they were asked), so nothing installs."""

from __future__ import annotations

import os
import pathlib
import shutil
import stat
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/usr/bin/env bash
# Stand-in for python3 and for the venvs' python: creates venvs, logs pip installs.
echo "$0 $*" >> "$SETUP_LOG"
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"
  cp "$0" "$3/bin/python"
  printf '#!/bin/sh\\n' > "$3/bin/det" && chmod +x "$3/bin/det"
fi
"""

FAKE_NPM = """#!/usr/bin/env bash
# Stand-in for npm: logs the call and puts an azurite-blob under .tools.
echo "npm $*" >> "$SETUP_LOG"
mkdir -p .tools/node_modules/.bin
printf '#!/bin/sh\\n' > .tools/node_modules/.bin/azurite-blob
chmod +x .tools/node_modules/.bin/azurite-blob
"""


def _executable(path: pathlib.Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run(root: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SETUP_LOG": str(root / "calls.log")}
    env["PATH"] = f"{root / 'fakebin'}:{env['PATH']}"
    return subprocess.run(
        ["bash", str(root / "scripts" / "setup.sh"), *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _calls(root: pathlib.Path) -> list[str]:
    log = root / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def _copy(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup.sh", root / "scripts" / "setup.sh")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    (root / "fakebin").mkdir()
    _executable(root / "fakebin" / "python3", FAKE_PYTHON)
    # The browser and PostgreSQL count as present, so no apt-get runs.
    for tool in ("chromium", "chromedriver", "initdb"):
        _executable(root / "fakebin" / tool, "#!/bin/sh\n")
    _executable(root / "fakebin" / "npm", FAKE_NPM)
    return root


def test_main_set_up_says_each_step_then_does_nothing_the_second_time(
    tmp_path: pathlib.Path,
) -> None:
    root = _copy(tmp_path)
    first = _run(root)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert lines[0] == "setup: virtual environment .venv ..."
    torch_done = "setup: PyTorch (torch==2.13.0, CPU build): done in "
    assert any(line.startswith(torch_done) for line in lines)
    assert lines[-1].startswith("setup: ready in ") and ".venv/bin/det" in lines[-1]
    installs = [c for c in _calls(root) if "pip install" in c]
    assert any("torch==2.13.0" in c for c in installs)
    assert any(c.endswith("-e .") for c in installs)  # no test extras for the main job
    assert not (root / ".refvenv").exists()

    again = _run(root)
    assert again.stdout == "setup: already set up (.venv); nothing to do\n"
    assert len(_calls(root)) == len(installs) + 1  # only the first run's venv + installs


def test_tests_set_up_adds_the_test_parts_and_a_changed_pyproject_reinstalls(
    tmp_path: pathlib.Path,
) -> None:
    root = _copy(tmp_path)
    assert _run(root).returncode == 0
    tests = _run(root, "--tests")
    assert tests.returncode == 0, tests.stderr
    assert "[dev,s3,azure,postgres]" in tests.stdout and ".refvenv" in tests.stdout
    assert (root / ".refvenv" / "bin" / "det").exists()
    assert any(c.startswith("npm install") and "azurite@" in c for c in _calls(root))
    assert _run(root, "--tests").stdout.endswith("nothing to do\n")
    assert _run(root).stdout.endswith("nothing to do\n")  # the main job needs a subset

    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text() + "\n# changed\n")
    rerun = _run(root, "--tests")
    assert "nothing to do" not in rerun.stdout and "done in" in rerun.stdout


def test_an_unknown_option_is_refused(tmp_path: pathlib.Path) -> None:
    bad = _run(_copy(tmp_path), "--test")
    assert bad.returncode == 2 and "usage: scripts/setup.sh [--tests]" in bad.stderr
