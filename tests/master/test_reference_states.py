"""Experiment and trial states as 0.37's API reports them, read by the reference's own CLI, and
its ``det e create --test-mode`` end to end (issue #15 items 1 and 2).

The reference derives an ACTIVE experiment's state from its allocations (QUEUED until one runs,
then RUNNING; docs/reference/master.md); its ``--test-mode`` first posts a ``validateOnly``
create, whose answer must parse as an (empty) experiment, and on a failed run prints the
trial's log, where users look for "resources failed with non-zero exit code".
"""

from __future__ import annotations

import pathlib
import re
import time
from collections.abc import Iterator

import pytest
from _kit.master import MasterProcess
from _kit.reference import REF, Ref
from _kit.trial_cluster import Cluster, config

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (REF / "bin" / "det").exists(),
        reason="no .refvenv with determined==0.37.0: run scripts/setup.sh --tests to create it",
    ),
]

TEST_MODE_CONFIG = """
name: test-mode
entrypoint: python3 train.py
searcher:
  name: single
  metric: loss
  max_length: 5
hyperparameters:
  lr: {type: double, minval: 0.01, maxval: 0.1}
"""

GOOD_TRAIN = """
from determined import core

with core.init() as ctx:
    for op in ctx.searcher.operations():
        for step in range(1, op.length + 1):
            ctx.train.report_training_metrics(step, {"loss": 1.0 / step})
        ctx.train.report_validation_metrics(op.length, {"loss": 0.5})
        op.report_completed(0.5)
"""

BAD_TRAIN = "raise RuntimeError('broken model definition')\n"


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    with MasterProcess(tmp_path_factory.mktemp("refstates") / "master", cpu_slots=1) as m:
        yield m


def _model(home: pathlib.Path, name: str, train: str) -> pathlib.Path:
    model = home / name
    model.mkdir(parents=True)
    (model / "train.py").write_text(train)
    return model


def _list_state(ref: Ref, exp_id: int) -> str:
    """The state column of ``det e list`` (the reference CLI) for one experiment."""
    listed = ref.det("e", "list", "--all")  # --all: the cluster's admin created it
    row = next(line for line in listed.splitlines() if line.strip().startswith(f"{exp_id} "))
    states = re.findall(r"\| ([A-Z_]+) +\|", row)
    assert states, row
    return states[0]


def test_validate_only_answers_an_empty_experiment(master: MasterProcess) -> None:
    r = master.session().post(
        master.url + "/api/v1/experiments",
        json={"config": TEST_MODE_CONFIG, "validateOnly": True},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["experiment"]["id"] == 0
    assert body["experiment"]["state"] == "STATE_UNSPECIFIED"
    assert body["experiment"]["checkpointSize"] == "0"
    assert body["config"] is None and body["warnings"] == []
    assert "bestTrialId" not in body["experiment"]  # optional fields stay unset, as there


def test_reference_test_mode_succeeds(master: MasterProcess, tmp_path: pathlib.Path) -> None:
    ref = Ref(master, tmp_path / "home")
    _model(ref.home, "model", GOOD_TRAIN)
    (ref.home / "cfg.yaml").write_text(TEST_MODE_CONFIG)
    out = ref.det("e", "create", "--test-mode", "cfg.yaml", "model")
    assert "Experiment configuration validation succeeded" in out, out
    assert "Model definition test succeeded" in out, out


def test_reference_test_mode_failure_names_the_resources_failure(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    ref = Ref(master, tmp_path / "home")
    _model(ref.home, "model", BAD_TRAIN)
    (ref.home / "cfg.yaml").write_text(TEST_MODE_CONFIG)
    out = ref.det("e", "create", "--test-mode", "cfg.yaml", "model", ok=False)
    wording = "resources failed with non-zero exit code: container failed with non-zero exit code: "
    assert wording in out, out
    assert "broken model definition" in out, out


def test_active_experiments_show_queued_then_running(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    cluster = Cluster(master)
    ref = Ref(master, tmp_path / "home")
    first = cluster.create(config(tmp_path / "a", max_length=400, sleep=0.05))
    cluster.wait_trial(first, "STATE_RUNNING", timeout=60)
    assert cluster.experiment(first)["state"] == "STATE_RUNNING"
    assert _list_state(ref, first) == "RUNNING"

    # The one slot is taken: the second experiment waits, and says so.
    second = cluster.create(config(tmp_path / "b", max_length=2))
    assert cluster.wait_trial(second, "STATE_QUEUED")["state"] == "STATE_QUEUED"
    assert cluster.experiment(second)["state"] == "STATE_QUEUED"
    assert _list_state(ref, second) == "QUEUED"
    listed = cluster.get("/api/v1/experiments")["experiments"]
    assert {e["id"]: e["state"] for e in listed}[second] == "STATE_QUEUED"

    # Pause shows PAUSED at once (not a derived state); the freed slot runs the second one.
    assert cluster.post(f"/api/v1/experiments/{first}/pause").ok
    assert cluster.experiment(first)["state"] == "STATE_PAUSED"
    cluster.wait_experiment(second, "STATE_RUNNING", "STATE_COMPLETED", timeout=60)
    cluster.wait_experiment(second, "STATE_COMPLETED", timeout=60)

    # Kill goes through STOPPING_KILLED (while the trial runs) to CANCELED.
    assert cluster.post(f"/api/v1/experiments/{first}/activate").ok
    cluster.wait_experiment(first, "STATE_RUNNING", timeout=60)
    assert cluster.post(f"/api/v1/experiments/{first}/kill").ok
    seen = []
    deadline = time.monotonic() + 60
    while not seen or seen[-1] != "STATE_CANCELED":
        assert time.monotonic() < deadline, seen
        state = cluster.experiment(first)["state"]
        if not seen or seen[-1] != state:
            seen.append(state)
        time.sleep(0.05)
    assert set(seen) <= {"STATE_RUNNING", "STATE_STOPPING_KILLED", "STATE_CANCELED"}, seen
    assert _list_state(ref, first) == "CANCELED"
