"""The two test tiers: ``pytest -m "not e2e"`` is the fast one; ``e2e`` tests start processes.

A test that starts a master, a launcher, ``det`` or a trial process is marked ``e2e``
(``pytestmark = pytest.mark.e2e`` in its module, or ``@pytest.mark.e2e`` on the test). The mark
is checked, not trusted: tests/conftest.py records the running test in :data:`current` and
installs :func:`audit_subprocess` as an audit hook, and :class:`_kit.master.MasterProcess` calls
:func:`require_e2e`, so an unmarked test that starts such a process fails at once, saying so,
instead of slowing down the fast tier unnoticed. ``python -c`` snippets and other programs are
free in either tier.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

current: pytest.Item | None = None
"""The test being run (set and cleared by tests/conftest.py); None between tests."""


def require_e2e(what: str) -> None:
    """Fail the running test unless it is marked ``e2e``."""
    item = current
    if item is not None and item.get_closest_marker("e2e") is None:
        pytest.fail(
            f"{item.nodeid} {what} but is not marked e2e: add `pytestmark = pytest.mark.e2e` to "
            "its module (or @pytest.mark.e2e to the test) so that the fast tier "
            '(pytest -m "not e2e") leaves it out',
            pytrace=False,
        )


def audit_subprocess(event: str, args: tuple[Any, ...]) -> None:
    """``sys.addaudithook`` hook: a new process that runs determined or a Python script file
    (``python -m determined...``, ``python x.py``, torchrun) needs an e2e test."""
    if event != "subprocess.Popen" or current is None:
        return
    argv = args[1]
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = [argv]
    words = [os.fsdecode(a) for a in argv]
    if _starts_e2e_process(words):
        require_e2e(f"starts `{' '.join(words)[:200]}`")


def _starts_e2e_process(argv: list[str]) -> bool:
    if not argv:
        return False
    program = os.path.basename(argv[0])
    if program == "torchrun":
        return True
    if not (argv[0] == sys.executable or program.startswith("python")):
        return False
    options = iter(argv[1:])
    for word in options:
        if word == "-c":
            return False
        if word == "-m":
            return next(options, "").split(".")[0] in ("determined", "torch")
        if word in ("-X", "-W"):
            next(options, None)
        elif not word.startswith("-"):
            return word.endswith(".py")
    return False
