"""docs/reference/master.md §6 item 48: ``det`` confirms each change in the reference's exact words
(Determined 0.37's ``det``), against a real master. ``Created``, ``Activated``, ``Paused``,
``Killed experiment`` and ``Killed trial`` are pinned in test_experiment.py and test_cluster.py;
``Continued experiment`` in tests/master/test_continue.py."""

from __future__ import annotations

import json
import pathlib

import pytest
from _kit.cli import Det

pytestmark = pytest.mark.e2e


def test_confirmations_are_the_references_words(
    det: Det, model_dir: tuple[pathlib.Path, pathlib.Path]
) -> None:
    config, model = model_dir
    out = det.ok("e", "create", str(config), str(model))
    assert out.startswith("Created experiment ")
    n = out.split()[-1]
    # No resource manager on this master: the trial is queued, so a cancel ends it at once.
    assert det.ok("e", "cancel", n) == f"Canceled experiment {n}\n"
    state = json.loads(det.ok("e", "describe", n, "--json"))[0]["experiment"]["state"]
    assert state == "STATE_CANCELED"
    assert det.ok("e", "archive", n) == f"Archived experiment {n}\n"
    assert det.ok("e", "unarchive", n) == f"Unarchived experiment {n}\n"
    assert det.ok("e", "label", "add", n, "x") == f"Added label 'x' to experiment {n}\n"
    assert det.ok("e", "label", "remove", n, "x") == f"Removed label 'x' from experiment {n}\n"
    assert det.ok("e", "set", "name", n, "nm") == f"Set name of experiment {n} to 'nm'\n"
    assert (
        det.ok("e", "set", "description", n, "d") == f"Set description of experiment {n} to 'd'\n"
    )
    got = json.loads(det.ok("e", "describe", n, "--json"))[0]["experiment"]
    assert (got["name"], got["description"], got["labels"], got["archived"]) == (
        "nm",
        "d",
        [],
        False,
    )
    trial = json.loads(det.ok("e", "lt", n, "--json"))[0]["id"]
    assert det.ok("t", "kill", str(trial)) == f"Killed trial {trial}\n"
    assert det.ok("e", "delete", n, "--yes") == f"Deletion of experiment {n} is in progress\n"
    gone = det("e", "describe", n)
    assert gone.returncode == 1 and "not found" in gone.stderr


def test_logs_of_a_missing_trial_print_only_the_404(det: Det) -> None:
    """No "Trial log stream ended ... reopen" hint for a trial that does not exist."""
    r = det("trial", "logs", "987654")
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr == "det: trial 987654 not found (HTTP 404)\n"
