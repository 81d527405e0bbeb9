"""Our cluster-mode Core API must put the same requests on the wire as Determined 0.37's client.

Each scenario in ``tests/fixtures/reference_wire/scenarios`` is plain user code. The fixtures next
to it hold what Determined 0.37.0 sent for it (``capture.py``); here the same script runs with our
package, as trial 42 of a fake master with the same canned answers, and the normalised requests,
exit code and stdout are compared stream by stream (``compare.py`` says what is strict and why).
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest
from fixtures.reference_wire import compare, normalize, scenario_env

pytestmark = pytest.mark.e2e

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def _fixture(name: str) -> dict:
    return json.loads((scenario_env.HERE / f"{name}.json").read_text())


def _run_ours(name: str, tmp_path: pathlib.Path) -> tuple[dict, str]:
    run = scenario_env.run_scenario(
        sys.executable, name, tmp_path, extra_env={"PYTHONPATH": str(REPO_ROOT)}, timeout=90
    )
    got = normalize.normalize_run(run.requests, run.stdout, run.returncode, run.substitutions)
    return got, run.stderr


def test_every_scenario_has_a_fixture() -> None:
    names = scenario_env.scenario_names()
    assert len(names) >= 7
    missing = [n for n in names if not (scenario_env.HERE / f"{n}.json").exists()]
    assert missing == []


@pytest.mark.parametrize("name", scenario_env.scenario_names())
def test_same_wire_traffic_as_reference(name: str, tmp_path: pathlib.Path) -> None:
    want = _fixture(name)
    poll_template = normalize.split_streams(_fixture("preempt")["requests"])["preemption"]
    got, stderr = _run_ours(name, tmp_path)
    problems = compare.compare_runs(name, want, got, poll_template)
    assert not problems, "\n\n".join(problems) + f"\n\n--- our stderr ---\n{stderr[-4000:]}"


def test_allocation_token_header_on_every_request(tmp_path: pathlib.Path) -> None:
    """The reference authenticates every trial call with ``Grpc-Metadata-x-allocation-token:
    Bearer <DET_SESSION_TOKEN>`` and never with ``Authorization``."""
    got, stderr = _run_ours("searcher", tmp_path)
    assert got["requests"], stderr
    for req in got["requests"]:
        assert req["headers"].get("Grpc-Metadata-X-Allocation-Token") == (
            f"Bearer {scenario_env.SESSION_TOKEN}"
        ), req
        assert "Authorization" not in req["headers"], req
