"""Lost unmanaged trials (0.37's MarkLostTrials): a running unmanaged trial whose process sends
nothing (no PATCH: state or heartbeat) for the master's ``--unmanaged-trial-timeout`` is marked
ERROR, ended at its last sign of life, with a line in its log saying why; its experiment ends
with it. A trial that heartbeats, or was never started, is left alone, and a master that was
down gives its trials a full timeout after it starts again before it judges them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from _kit.master import MasterProcess

from determined.master import __main__ as master_main
from determined.master.store._time import parse

pytestmark = pytest.mark.e2e

TIMEOUT_S = 2.0
CONFIG = """\
name: lost
searcher: {name: single, metric: unmanaged, max_length: 100000000}
checkpoint_storage: {type: shared_fs, host_path: /tmp/core-v2-lost}
"""


@pytest.fixture()
def master(tmp_path: Any) -> Iterator[MasterProcess]:
    args = ["--unmanaged-trial-timeout", f"{TIMEOUT_S:g}s"]
    with MasterProcess(tmp_path / "data", cpu_slots=1, args=args) as m:
        yield m


def _ok(
    s: requests.Session, master: MasterProcess, method: str, path: str, body: Any = None
) -> Any:
    r = s.request(method, master.url + "/api/v1" + path, json=body, timeout=30)
    assert r.status_code == 200, f"{method} {path}: {r.status_code} {r.text}"
    return r.json()


def _trial(s: requests.Session, master: MasterProcess, *, start: bool) -> tuple[int, int]:
    exp = _ok(s, master, "POST", "/experiments", {"config": CONFIG, "unmanaged": True})
    exp_id = exp["experiment"]["id"]
    body = {"experimentId": exp_id, "hparams": {}, "unmanaged": True}
    trial_id = _ok(s, master, "POST", "/trials", body)["trial"]["id"]
    if start:
        _ok(s, master, "POST", f"/trials/{trial_id}/start", {"trialId": trial_id})
        patch = {"trialId": trial_id, "state": "STATE_RUNNING"}
        _ok(s, master, "PATCH", f"/trials/{trial_id}", patch)
    return exp_id, trial_id


def _state(s: requests.Session, master: MasterProcess, kind: str, id_: int) -> str:
    return str(_ok(s, master, "GET", f"/{kind}s/{id_}")[kind]["state"])


def _heartbeat(s: requests.Session, master: MasterProcess, trial_id: int) -> None:
    _ok(s, master, "PATCH", f"/trials/{trial_id}", {"trialId": trial_id})


def test_a_silent_trial_is_lost_and_a_live_one_is_not(master: MasterProcess) -> None:
    s = master.session()
    silent_exp, silent = _trial(s, master, start=True)
    spoke_at = time.time()
    live_exp, live = _trial(s, master, start=True)
    _, never_started = _trial(s, master, start=False)

    # The first check waits TIMEOUT_S after the master started, then runs every TIMEOUT_S/5.
    deadline = time.monotonic() + 4 * TIMEOUT_S + 10
    while _state(s, master, "trial", silent) == "STATE_RUNNING":
        assert time.monotonic() < deadline, "the silent trial was never marked lost"
        _heartbeat(s, master, live)
        time.sleep(0.2)
    _heartbeat(s, master, live)

    trial = _ok(s, master, "GET", f"/trials/{silent}")["trial"]
    assert trial["state"] == "STATE_ERROR"
    ended = trial["endTime"]
    # Ended when it last spoke (its RUNNING patch), not when the master noticed.
    end = parse(ended)
    assert end is not None and abs(end.timestamp() - spoke_at) < 1.0, (ended, spoke_at)
    assert _state(s, master, "experiment", silent_exp) == "STATE_ERROR"
    logs = _ok(s, master, "GET", f"/tasks/{trial['taskId']}/logs")["logs"]
    text = "".join(line["log"] for line in logs)
    assert f"trial {silent} is lost" in text and "Run the script again" in text

    # The one that kept sending heartbeats runs on, and so does its experiment.
    time.sleep(TIMEOUT_S / 2)
    assert _state(s, master, "trial", live) == "STATE_RUNNING"
    assert _state(s, master, "experiment", live_exp) == "STATE_RUNNING"
    # A trial that was never started has no process to lose.
    assert _state(s, master, "trial", never_started) == "STATE_QUEUED"

    # A rerun of the lost one's script starts it again.
    again = _ok(s, master, "POST", f"/trials/{silent}/start", {"trialId": silent})
    assert again["trialRunId"] == 2
    assert _state(s, master, "experiment", silent_exp) == "STATE_RUNNING"


def test_a_restarted_master_waits_a_full_timeout_before_judging(master: MasterProcess) -> None:
    s = master.session()
    exp_id, trial_id = _trial(s, master, start=True)
    master.stop()
    time.sleep(TIMEOUT_S + 1)  # the trial's heartbeats would have failed all this time
    master.start()
    s = master.session()
    # Well past its timeout by its last activity, but the master has just come back.
    assert _state(s, master, "trial", trial_id) == "STATE_RUNNING"
    # The process's heartbeats get through again, well within the timeout of each other.
    until = time.monotonic() + TIMEOUT_S * 2
    while time.monotonic() < until:
        _heartbeat(s, master, trial_id)
        time.sleep(TIMEOUT_S / 4)
    assert _state(s, master, "trial", trial_id) == "STATE_RUNNING"
    assert _state(s, master, "experiment", exp_id) == "STATE_RUNNING"


def test_the_timeout_must_be_a_positive_duration(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    for bad in ("0s", "soon"):
        args = ["--data-dir", str(tmp_path / "data"), "--unmanaged-trial-timeout", bad]
        assert master_main.main(args) == 2
        assert "error: --unmanaged-trial-timeout" in capsys.readouterr().err
