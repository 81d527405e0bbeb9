"""The fast tier's guard (tests/_kit/tiers.py): an unmarked test cannot start a master, launcher,
``det`` or trial process; ``python -c`` and other programs stay free."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
from _kit import tiers
from _kit.master import MasterProcess

PY = sys.executable


@pytest.mark.parametrize(
    ("argv", "e2e"),
    [
        ([PY, "-m", "determined.master", "--port", "1"], True),
        ([PY, "-m", "determined.cli", "e", "list"], True),
        ([PY, "-m", "determined.launch.torch_distributed", "--", "x"], True),
        ([PY, "-m", "torch.distributed.run", "x.py"], True),
        ([PY, "-u", "/tmp/train.py"], True),
        (["python3", "-X", "dev", "train.py"], True),
        (["/usr/bin/torchrun", "--nproc-per-node", "2", "x.py"], True),
        ([PY, "-c", "print(1)"], False),
        ([PY, "-c", "import x", "y.py"], False),
        ([PY, "-m", "pip", "list"], False),
        (["sh", "-c", "python3 train.py"], False),
        (["true"], False),
        ([], False),
    ],
)
def test_which_processes_need_e2e(argv: list[str], e2e: bool) -> None:
    assert tiers._starts_e2e_process(argv) is e2e


def test_an_unmarked_test_cannot_start_a_master(tmp_path: pathlib.Path) -> None:
    master = MasterProcess(tmp_path / "master")
    with pytest.raises(pytest.fail.Exception, match="starts a master process but is not marked"):
        master.start()
    assert master.proc is None and master not in MasterProcess.running


def test_an_unmarked_test_cannot_start_det() -> None:
    # The audit hook refuses before anything is forked.
    with pytest.raises(pytest.fail.Exception, match="starts `.* -m determined.cli --help`"):
        subprocess.run([PY, "-m", "determined.cli", "--help"], capture_output=True)


def test_an_unmarked_test_may_run_python_c() -> None:
    out = subprocess.run([PY, "-c", "print(6 * 7)"], capture_output=True, text=True, check=True)
    assert out.stdout == "42\n"


@pytest.mark.e2e
def test_a_marked_test_may() -> None:
    tiers.require_e2e("starts a master process")
