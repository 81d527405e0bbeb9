"""determined/master/api/_hot.py over HTTP: a metric report on the hot path (an allocation's
cached token) is answered exactly as the FastAPI route answers it (the experiment owner's token
takes that route), and the master's checks in front (Host, body size, CSRF) still apply."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from _kit.master import MasterProcess, Run

pytestmark = pytest.mark.e2e


def _post(session: requests.Session, url: str, body: Any) -> tuple[int, Any]:
    if isinstance(body, bytes):
        r = session.post(url, data=body)
    else:
        r = session.post(url, json=body)
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, r.text


def _report(run: Run, steps: int, **over: Any) -> dict[str, Any]:
    metrics = {
        "trialId": run.trial_id,
        "trialRunId": run.run_id,
        "stepsCompleted": steps,
        "metrics": {"avgMetrics": {"loss": 1.0}},
    }
    metrics.update(over)
    return {"group": "training", "metrics": metrics}


def test_hot_path_answers_exactly_as_the_route(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    url = shared_master.url + f"/api/v1/trials/{run.trial_id}/metrics"
    assert run.metrics("training", 1, {"loss": 1.0}).status_code == 200  # token now cached
    bad_bodies: list[Any] = [
        b"{not json",
        {"group": "training"},
        {"group": "training", "metrics": {"trialId": "x"}},
        _report(run, 2, trialRunId=run.run_id + 1),  # a stale run: 400 from the store
        _report(run, 2, trialId=run.trial_id + 1000),  # names another trial
        _report(run, -3),
        _report(run, 2, reportTime="yesterday"),
        {"group": "a.b", "metrics": _report(run, 2)["metrics"]},
    ]
    for body in bad_bodies:
        hot = _post(run.trial, url, body)
        route = _post(run.admin, url, body)
        assert hot == route, body
        assert hot[0] == 400, (body, hot)
    # A conflict found once the report reaches the store, then a good report: both paths agree.
    assert _post(run.trial, url, _report(run, 1, metrics={"avgMetrics": {"loss": 2.0}})) == (
        _post(run.admin, url, _report(run, 1, metrics={"avgMetrics": {"loss": 2.0}}))
    )
    assert _post(run.trial, url, _report(run, 3)) == (200, {})
    assert _post(run.admin, url, _report(run, 4)) == (200, {})
    trial = run.get(f"/api/v1/trials/{run.trial_id}")["trial"]
    assert trial["summaryMetrics"]["avg_metrics"]["loss"]["count"] == 3
    assert trial["totalBatchesProcessed"] == 4


def test_another_trials_token_is_refused_on_the_hot_path(shared_master: MasterProcess) -> None:
    mine, other = Run(shared_master), Run(shared_master)
    assert mine.metrics("training", 1, {"loss": 1.0}).status_code == 200
    url = shared_master.url + f"/api/v1/trials/{other.trial_id}/metrics"
    status, body = _post(mine.trial, url, _report(other, 1))
    assert status == 403 and f"not {other.trial_id}" in body["message"]


def test_the_checks_in_front_apply_to_the_hot_path(shared_master: MasterProcess) -> None:
    run = Run(shared_master)
    url = shared_master.url + f"/api/v1/trials/{run.trial_id}/metrics"
    assert run.metrics("training", 1, {"loss": 1.0}).status_code == 200
    r = run.trial.post(url, json=_report(run, 2), headers={"Host": "evil.example"})
    assert r.status_code == 421
    r = run.trial.post(url, data=b" " * (17 * 1024 * 1024))  # past the 16 MiB limit
    assert r.status_code == 413
    # A report authenticated by the cookie alone is a state change without a CSRF token.
    browser = requests.Session()
    browser.cookies.set("auth", run.token)
    assert browser.post(url, json=_report(run, 2)).status_code == 403
    assert _post(run.trial, url, _report(run, 2)) == (200, {})
