"""determined/master/api/_hot.py over HTTP: a metric report on the hot path (an allocation's
cached token) is answered exactly as the FastAPI route answers it (the experiment owner's token
takes that route), and the master's checks in front (Host, body size, CSRF) still apply."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
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


# A token the cache does not hold yet (each Run's is fresh) is read by the master's token
# resolver and the report goes on in the lane; whatever it is not, the route answers.


def test_a_trials_first_report_is_answered_as_the_route(shared_master: MasterProcess) -> None:
    cold, warm, other = Run(shared_master), Run(shared_master), Run(shared_master)
    assert warm.metrics("training", 1, {"loss": 1.0}).status_code == 200
    assert cold.metrics("training", 1, {"loss": 1.0}).status_code == 200  # its first
    assert cold.get(f"/api/v1/trials/{cold.trial_id}")["trial"]["totalBatchesProcessed"] == 1
    # Another trial's token, not cached yet: 403 with the route's message.
    url = shared_master.url + f"/api/v1/trials/{warm.trial_id}/metrics"
    status, body = _post(other.trial, url, _report(warm, 2))
    assert status == 403 and f"not {warm.trial_id}" in body["message"]
    # A first report whose body does not parse: the route's 400, as for a cached token.
    fresh = Run(shared_master)
    url = shared_master.url + f"/api/v1/trials/{fresh.trial_id}/metrics"
    assert _post(fresh.trial, url, b"{not json") == _post(fresh.admin, url, b"{not json")


def test_a_first_report_with_a_dead_or_unknown_token_is_refused(
    shared_master: MasterProcess,
) -> None:
    run = Run(shared_master)
    assert run.exit() == "STATE_COMPLETED"  # its token is revoked before it was ever used
    url = shared_master.url + f"/api/v1/trials/{run.trial_id}/metrics"
    status, body = _post(run.trial, url, _report(run, 1))
    assert status == 401 and "token" in body["message"]
    stranger = shared_master.session("not-a-token", allocation=True)
    assert _post(stranger, url, _report(run, 1))[0] == 401


def test_many_trials_first_reports_at_once_are_each_stored_once(
    shared_master: MasterProcess,
) -> None:
    runs = [Run(shared_master) for _ in range(24)]
    with ThreadPoolExecutor(len(runs)) as pool:
        statuses = list(
            pool.map(lambda r: r.metrics("training", 1, {"loss": 1.0}).status_code, runs)
        )
    assert statuses == [200] * len(runs)
    for run in runs:
        trial = run.get(f"/api/v1/trials/{run.trial_id}")["trial"]
        assert trial["summaryMetrics"]["avg_metrics"]["loss"]["count"] == 1
