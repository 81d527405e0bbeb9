"""The web UI in headless Chromium against a real master running real trials: each page
renders, its charts carry exactly the reported points, and actions reach the master."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
import yaml
from _kit.master import MasterProcess
from _kit.webui import (
    Cluster,
    chart_series,
    expected_training,
    expected_validation,
    random_config,
    wait_for,
)

pytestmark = pytest.mark.e2e

pytest.importorskip("selenium")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def assert_points(got: list[list[float]], want: list[list[float]]) -> None:
    assert [p[0] for p in got] == [p[0] for p in want]
    assert [p[1] for p in got] == pytest.approx([p[1] for p in want])


def test_experiment_list_shows_experiments_and_pause_changes_state(
    cluster: Cluster, browser: Any, screenshot: Callable[[str], None]
) -> None:
    slow = random_config("webui-slow", max_trials=1, max_length=400, sleep=0.2)
    slow["hyperparameters"]["lr"] = 0.5
    exp_id = cluster.create(slow)
    cluster.wait_state(exp_id, "STATE_QUEUED", "STATE_RUNNING")
    browser.get(cluster.url + "/")
    row = f"tr[data-exp-id='{exp_id}']"
    done_row = f"tr[data-exp-id='{cluster.done}']"
    wait_for(browser, lambda: browser.find_element(By.CSS_SELECTOR, done_row), "the finished row")
    done = browser.find_element(By.CSS_SELECTOR, done_row)
    assert done.get_attribute("data-state") == "STATE_COMPLETED"
    assert "webui-done" in done.text and "random" in done.text
    best = min(t["searcherMetricValue"] for t in cluster.trials(cluster.done))
    cell = done.find_element(By.CSS_SELECTOR, "td[data-key='best']").text
    assert float(cell) == pytest.approx(best, rel=1e-4)
    progress = done.find_element(By.CSS_SELECTOR, "[data-progress]")
    assert progress.get_attribute("data-progress") == "100"

    pause = f"{row} button[data-action='pause']"
    wait_for(browser, lambda: browser.find_element(By.CSS_SELECTOR, pause), "a pause button")
    screenshot("experiments")
    url_before = browser.current_url
    browser.find_element(By.CSS_SELECTOR, pause).click()
    wait_for(
        browser,
        lambda: (
            browser.find_element(By.CSS_SELECTOR, row).get_attribute("data-state") == "STATE_PAUSED"
        ),
        "the row to show STATE_PAUSED",
    )
    assert browser.current_url == url_before  # updated in place, no navigation
    assert cluster.experiment(exp_id)["state"] == "STATE_PAUSED"
    # the same page, still without a reload, offers activate and kill
    activate = f"{row} button[data-action='activate']"
    wait_for(browser, lambda: browser.find_element(By.CSS_SELECTOR, activate), "activate")
    kill = f"{row} button[data-action='kill']"
    browser.find_element(By.CSS_SELECTOR, kill).click()
    WebDriverWait(browser, 5).until(EC.alert_is_present())
    browser.switch_to.alert.dismiss()  # "Kill experiment N?" answered no: nothing happens
    assert cluster.experiment(exp_id)["state"] == "STATE_PAUSED"
    browser.find_element(By.CSS_SELECTOR, kill).click()
    WebDriverWait(browser, 5).until(EC.alert_is_present())
    browser.switch_to.alert.accept()
    cluster.wait_state(exp_id, "STATE_CANCELED")
    wait_for(
        browser,
        lambda: (
            browser.find_element(By.CSS_SELECTOR, row).get_attribute("data-state")
            == "STATE_CANCELED"
        ),
        "the row to show STATE_CANCELED",
    )
    cluster.killed = exp_id


def test_archive_from_the_list(cluster: Cluster, browser: Any) -> None:
    paths = cluster.get("/openapi.json")["paths"]
    if "/api/v1/experiments/{experiment_id}/archive" not in paths:
        pytest.skip("this master has no POST /api/v1/experiments/{id}/archive yet")
    exp_id = cluster.killed or cluster.done
    row = f"tr[data-exp-id='{exp_id}']"
    browser.get(cluster.url + "/")
    archive = f"{row} button[data-action='archive']"
    wait_for(browser, lambda: browser.find_element(By.CSS_SELECTOR, archive), "archive button")
    browser.find_element(By.CSS_SELECTOR, archive).click()
    wait_for(browser, lambda: not browser.find_elements(By.CSS_SELECTOR, row), "archived row gone")
    assert cluster.experiment(exp_id)["archived"] is True
    browser.find_element(By.ID, "show-archived").click()
    unarchive = f"{row} button[data-action='unarchive']"
    wait_for(browser, lambda: browser.find_element(By.CSS_SELECTOR, unarchive), "shown again")
    browser.find_element(By.CSS_SELECTOR, unarchive).click()
    wait_for(browser, lambda: not cluster.experiment(exp_id)["archived"], "unarchived")


def test_experiment_page_learning_curves_trials_and_config(
    cluster: Cluster, browser: Any, screenshot: Callable[[str], None]
) -> None:
    trials = cluster.trials(cluster.done)
    browser.get(f"{cluster.url}/experiments/{cluster.done}")
    wait_for(browser, lambda: len(chart_series(browser, "learning-curve")) == 2, "two curves")
    curves = chart_series(browser, "learning-curve")
    for t in trials:
        assert_points(curves[f"trial {t['id']}"], expected_validation(t["hparams"]["lr"], 6))
    # hovering a curve's point names its trial and hyperparameters
    tip = browser.execute_script(
        "const c = document.getElementById('learning-curve'), u = c._plot;"
        "u.setCursor({left: u.valToPos(u.data[0][0], 'x'), top: u.valToPos(u.data[1][0], 'y')});"
        "return c.querySelector('.tip').textContent;"
    )
    first = sorted(t["id"] for t in trials)[0]
    lr = next(t["hparams"]["lr"] for t in trials if t["id"] == first)
    assert f"trial {first}" in tip and f"lr={lr}" in tip, tip
    # hyperparameter vs metric: one point per trial, (lr, best loss)
    hp = chart_series(browser, "hp-chart")["best loss"]
    want = sorted([t["hparams"]["lr"], t["hparams"]["lr"] / 6] for t in trials)
    assert_points(sorted(hp), want)
    # the trials table starts sorted by the searcher metric, best first
    rows = browser.find_elements(By.CSS_SELECTOR, "#trials tbody tr")
    shown = [int(r.get_attribute("data-trial-id")) for r in rows]
    assert shown == [t["id"] for t in sorted(trials, key=lambda t: t["searcherMetricValue"])]
    browser.find_element(By.CSS_SELECTOR, "#trials th[data-key='best']").click()
    rows = browser.find_elements(By.CSS_SELECTOR, "#trials tbody tr")
    assert [int(r.get_attribute("data-trial-id")) for r in rows] == shown[::-1]
    # the summary names the searcher's best trial and its checkpoint (each trial's best
    # validation is its last, where it also checkpointed), with a download button
    best = min(trials, key=lambda t: t["searcherMetricValue"])
    link = browser.find_element(By.CSS_SELECTOR, "#summary [data-best-trial]")
    assert link.get_attribute("data-best-trial") == str(best["id"])
    assert link.get_attribute("href").endswith(f"/trials/{best['id']}")
    ckpts = cluster.get(f"/api/v1/trials/{best['id']}/checkpoints")["checkpoints"]
    (last,) = [c for c in ckpts if c["metadata"]["steps_completed"] == 6]
    shown_ckpt = browser.find_element(By.CSS_SELECTOR, "#summary [data-best-checkpoint]")
    assert shown_ckpt.get_attribute("data-best-checkpoint") == last["uuid"]
    assert f"batch 6, loss {best['searcherMetricValue']:.5g}" in shown_ckpt.text
    assert shown_ckpt.find_elements(By.CSS_SELECTOR, f"button[data-download='{last['uuid']}']")
    config = browser.find_element(By.ID, "config").get_attribute("textContent")
    assert yaml.safe_load(config) == cluster.experiment(cluster.done)["config"]
    tricky = {
        "words": ["yes", "No", "on", "null", "~", "1e5", "0.5", "-3", "", " x", "a: b", "#c"],
        "nested": [[1, [2, {}]], {"k": [], "a b": {"c:": None}}, [{"x": 1, "y": [True]}]],
        "odd keys": {"-": 1, "'q'": '"dq"', "ü": "ünï", "multi": "l1\nl2", "t": "\t"},
    }
    back = browser.execute_script("return toYaml(arguments[0])", tricky)
    assert yaml.safe_load(back) == tricky, back
    screenshot("experiment")
    browser.find_element(By.CSS_SELECTOR, "input[name=cfg][value=original]").click()
    assert "minval: 0.1" in browser.find_element(By.ID, "config").text


def test_experiment_page_shows_asha_rungs(
    cluster: Cluster, browser: Any, screenshot: Callable[[str], None]
) -> None:
    exp_id = cluster.finished_asha()
    rungs = cluster.get(f"/api/v1/webui/experiments/{exp_id}/rungs")["brackets"][0]["rungs"]
    browser.get(f"{cluster.url}/experiments/{exp_id}")
    wait_for(browser, lambda: browser.find_element(By.ID, "rungs-card").is_displayed(), "rungs")
    rows = browser.find_elements(By.CSS_SELECTOR, "#rungs tr[data-rung]")
    assert len(rows) == 2
    for row, rung in zip(rows, rungs, strict=True):
        cells = row.find_elements(By.TAG_NAME, "td")
        assert cells[1].text == str(rung["length"])
        links = cells[3].find_elements(By.TAG_NAME, "a")
        assert {a.get_attribute("href").rsplit("/", 1)[1] for a in links} == {
            str(t["trialId"]) for t in rung["trials"]
        }
        promoted = {a.text.split(":")[0] for a in links if "promoted" in a.get_attribute("class")}
        assert promoted == {str(t["trialId"]) for t in rung["trials"] if t["promoted"]}
    # its learning curves stop at the rung each trial reached
    wait_for(browser, lambda: len(chart_series(browser, "learning-curve")) == 4, "4 curves")
    ends = {k: v[-1][0] for k, v in chart_series(browser, "learning-curve").items()}
    assert set(ends.values()) == {2, 4}
    screenshot("asha")


def test_trial_page_metrics_checkpoints_and_logs(
    cluster: Cluster, browser: Any, screenshot: Callable[[str], None]
) -> None:
    trial = cluster.trials(cluster.done)[0]
    lr = trial["hparams"]["lr"]
    browser.get(f"{cluster.url}/trials/{trial['id']}")
    wait_for(browser, lambda: chart_series(browser, "training-chart"), "training chart")
    training = chart_series(browser, "training-chart")
    assert set(training) == {"loss", "accuracy"}
    # the hyperparameters as a table: one row each, name and value
    wait_for(browser, lambda: browser.find_element(By.CSS_SELECTOR, "#hparams tr"), "hparams")
    rows = browser.find_elements(By.CSS_SELECTOR, "#hparams tr[data-hparam]")
    assert [r.get_attribute("data-hparam") for r in rows] == ["lr"]
    name, value = rows[0].find_elements(By.TAG_NAME, "td")
    assert name.text == "lr" and float(value.text) == pytest.approx(lr, rel=1e-4)
    assert "null" not in browser.find_element(By.ID, "summary").text
    assert_points(training["loss"], expected_training(lr, 6))
    wait_for(browser, lambda: chart_series(browser, "validation-chart"), "validation chart")
    assert_points(chart_series(browser, "validation-chart")["loss"], expected_validation(lr, 6))

    wait_for(browser, lambda: "trained to 6" in browser.find_element(By.ID, "logs").text, "logs")
    screenshot("trial")

    # log scale and smoothing change what is drawn; unticking a metric removes its series
    browser.find_element(By.CSS_SELECTOR, "#training-picks input[data-metric='accuracy']").click()
    assert set(chart_series(browser, "training-chart")) == {"loss"}
    browser.execute_script(
        "const s = document.getElementById('training-smooth'); s.value = 0.5;"
        "s.dispatchEvent(new Event('input'));"
    )
    browser.find_element(By.ID, "training-log").click()
    distr = "return document.getElementById('training-chart')._plot.scales.y.distr"
    assert browser.execute_script(distr) == 3  # uPlot's log scale
    smoothed = chart_series(browser, "training-chart")["loss"]
    assert smoothed[0][1] == pytest.approx(lr * 10)  # debiased: the first point is unchanged
    assert smoothed[1][1] == pytest.approx((0.25 * lr * 10 + 0.5 * lr * 5) / 0.75)

    ckpts = cluster.get(f"/api/v1/trials/{trial['id']}/checkpoints")["checkpoints"]
    assert ckpts
    for c in ckpts:
        wait_for(
            browser,
            lambda c=c: browser.find_element(By.CSS_SELECTOR, f"tr[data-uuid='{c['uuid']}']"),
            f"checkpoint {c['uuid']}",
        )
    row = browser.find_element(By.CSS_SELECTOR, f"tr[data-uuid='{ckpts[-1]['uuid']}']")
    assert "loss=" in row.text and row.find_elements(By.CSS_SELECTOR, "button[data-download]")

    wait_for(browser, lambda: "trained to 6" in browser.find_element(By.ID, "logs").text, "logs")
    logs = browser.find_element(By.ID, "logs")
    assert f"hello from trial {trial['id']}" in logs.text
    total = int(logs.get_attribute("data-lines"))
    search = browser.find_element(By.ID, "log-search")
    search.send_keys("trained to")
    wait_for(browser, lambda: int(logs.get_attribute("data-lines")) < total, "search filter")
    assert all("trained to" in line for line in logs.text.splitlines() if line)
    assert browser.find_elements(By.CSS_SELECTOR, "#logs mark")
    search.clear()
    browser.execute_script(
        "const s = document.getElementById('log-rank'); s.value = '0';"
        "s.dispatchEvent(new Event('change'));"
    )
    ranked = logs.text
    assert "trained to 6" in ranked and f"hello from trial {trial['id']}" not in ranked


def test_alerts_show_on_the_experiment_and_trial_pages(cluster: Cluster, browser: Any) -> None:
    """What core.Context.alert() posts (POST /api/v1/webhooks/custom) is listed on both pages."""
    first, second = (t["id"] for t in cluster.trials(cluster.done))
    for trial_id, title, level in ((first, "loss spiked", "WARNING"), (second, "done", "INFO")):
        body = {
            "data": {
                "title": title,
                "description": f"from {trial_id}",
                "level": f"LOG_LEVEL_{level}",
            },
            "experimentId": cluster.done,
            "trialId": trial_id,
        }
        r = cluster.s.post(cluster.url + "/api/v1/webhooks/custom", json=body)
        assert r.status_code == 200, r.text
    browser.get(f"{cluster.url}/experiments/{cluster.done}")
    wait_for(browser, lambda: browser.find_element(By.ID, "alerts-card").is_displayed(), "alerts")
    rows = browser.find_elements(By.CSS_SELECTOR, "#alerts-card tr.alert")
    cells = [[c.text for c in r.find_elements(By.TAG_NAME, "td")][1:] for r in rows]
    assert cells == [
        ["WARNING", str(first), "loss spiked", f"from {first}"],
        ["INFO", str(second), "done", f"from {second}"],
    ]
    browser.get(f"{cluster.url}/trials/{second}")
    wait_for(browser, lambda: browser.find_element(By.ID, "alerts-card").is_displayed(), "alerts")
    rows = browser.find_elements(By.CSS_SELECTOR, "#alerts-card tr.alert")
    assert [[c.text for c in r.find_elements(By.TAG_NAME, "td")][1:] for r in rows] == [
        ["INFO", "done", f"from {second}"]
    ]


def test_login_page_after_logout(
    cluster: Cluster, browser: Any, screenshot: Callable[[str], None]
) -> None:
    browser.get(cluster.url + "/")
    wait_for(browser, lambda: browser.find_element(By.ID, "who").text == "determined", "user")
    browser.find_element(By.ID, "logout").click()
    wait_for(browser, lambda: "/login" in browser.current_url, "the login page")
    browser.get(cluster.url + f"/experiments/{cluster.done}")  # no automatic login now
    wait_for(browser, lambda: "/login?next=" in browser.current_url, "redirect to /login")
    screenshot("login")
    browser.find_element(By.ID, "username").clear()
    browser.find_element(By.ID, "username").send_keys("nobody")
    browser.find_element(By.CSS_SELECTOR, "form button").click()
    wait_for(browser, lambda: "Login failed" in browser.find_element(By.ID, "error").text, "error")
    browser.find_element(By.ID, "username").clear()
    browser.find_element(By.ID, "username").send_keys("admin")
    browser.find_element(By.CSS_SELECTOR, "form button").click()
    wait_for(
        browser,
        lambda: browser.current_url.endswith(f"/experiments/{cluster.done}"),
        "back on the experiment page",
    )
    wait_for(browser, lambda: browser.find_element(By.ID, "who").text == "admin", "admin")
    # a "next" that points at another site is ignored
    browser.find_element(By.ID, "logout").click()
    wait_for(browser, lambda: "/login" in browser.current_url, "the login page again")
    for evil in ("//example.org/x", "/\\example.org/x"):
        browser.get(cluster.url + "/login?next=" + quote(evil, safe=""))
        browser.find_element(By.ID, "username").clear()
        browser.find_element(By.ID, "username").send_keys("admin")
        browser.find_element(By.CSS_SELECTOR, "form button").click()
        wait_for(browser, lambda: browser.current_url == cluster.url + "/", f"/ after {evil}")
        browser.execute_script("localStorage.removeItem('det_token')")


def test_the_cluster_message_is_a_banner_on_every_page(cluster: Cluster, browser: Any) -> None:
    admin = cluster.master.session()  # setting it needs an admin
    body = {"message": "maintenance at 18:00", "duration": "1h"}
    r = admin.put(cluster.url + "/api/v1/master/cluster_message", json=body)
    assert r.status_code == 200, r.text
    try:
        for page in ("/", f"/experiments/{cluster.done}"):
            browser.get(cluster.url + page)
            wait_for(browser, lambda: browser.find_element(By.ID, "cluster-message"), "banner")
            text = browser.find_element(By.ID, "cluster-message").text
            assert text.startswith("maintenance at 18:00 (until "), text
    finally:
        assert admin.delete(cluster.url + "/api/v1/master/cluster_message").ok
    browser.get(cluster.url + "/")
    wait_for(browser, lambda: browser.find_element(By.ID, "who").text, "the page")
    assert browser.find_elements(By.ID, "cluster-message") == []


def test_another_users_experiment_shows_a_permission_error(cluster: Cluster, browser: Any) -> None:
    """The web UI's user (``determined``) may not pause an admin's experiment: the page says
    why, and keeps saying it while it polls; the experiment does not change."""
    admin = cluster.master.session()
    config = random_config("webui-admins", max_trials=1, max_length=400, sleep=0.2)
    exp_id = cluster.create(config, session=admin)
    try:
        browser.get(cluster.url + f"/experiments/{exp_id}")
        pause = "button[data-action='pause']"
        wait_for(browser, lambda: browser.find_element(By.CSS_SELECTOR, pause), "a pause button")
        browser.find_element(By.CSS_SELECTOR, pause).click()

        def shown() -> bool:
            text = browser.find_element(By.ID, "error").text
            return "Permission denied" in text and f"experiment {exp_id} is not yours" in text

        wait_for(browser, shown, "the permission error")
        time.sleep(2.5)  # a poll later, still there
        assert shown()
        assert cluster.experiment(exp_id)["state"] != "STATE_PAUSED"
    finally:
        admin.post(cluster.url + f"/api/v1/experiments/{exp_id}/kill")


PAUSED = """
name: paged-{n}
entrypoint: python3 train.py
searcher: {{name: single, metric: loss, max_length: 100}}
hyperparameters: {{lr: 0.1}}
"""


def test_the_experiment_list_shows_a_page_newest_first_in_one_request(
    tmp_path: pathlib.Path, browser: Any
) -> None:
    """103 experiments: the list shows the newest 100 and pages to the other 3 and back,
    reading each page (with each experiment's best metric) in one request: no request per
    experiment, however many the cluster holds."""
    with MasterProcess(tmp_path / "master") as m:
        s = m.session()
        ids = []
        for n in range(103):
            body = {"config": PAUSED.format(n=n), "activate": False}
            r = s.post(m.url + "/api/v1/experiments", json=body)
            assert r.status_code == 200, r.text
            ids.append(int(r.json()["experiment"]["id"]))
        browser.get(m.url + "/")

        def shown() -> list[int]:
            rows = browser.find_elements(By.CSS_SELECTOR, "#experiments tr[data-exp-id]")
            return [int(r.get_attribute("data-exp-id")) for r in rows]

        newest = ids[::-1][:100]
        wait_for(browser, lambda: shown() == newest, "the newest 100 experiments")
        assert browser.find_element(By.ID, "shown").text == "1–100 of 103"
        assert browser.find_element(By.CSS_SELECTOR, "[data-page='newer']").get_attribute(
            "disabled"
        )
        browser.find_element(By.CSS_SELECTOR, "[data-page='older']").click()
        wait_for(browser, lambda: shown() == ids[2::-1], "the oldest 3 experiments")
        assert browser.find_element(By.ID, "shown").text == "101–103 of 103"
        browser.find_element(By.CSS_SELECTOR, "[data-page='newer']").click()
        wait_for(browser, lambda: shown() == newest, "the newest 100 again")
        time.sleep(2.5)  # a poll more
        asked = browser.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
        )
        lists = [a for a in asked if "/api/v1/experiments?" in a]
        assert lists and all("limit=100" in a for a in lists), lists
        assert not [a for a in asked if "searcher/best_searcher_validation_metric" in a]
