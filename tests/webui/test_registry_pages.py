"""The web UI's model registry pages (models -> versions -> checkpoint's trial) and the
project filter of the experiment list, in headless Chromium against a real master."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _kit.master import MasterProcess, Run
from _kit.webui import wait_for

pytestmark = pytest.mark.e2e

pytest.importorskip("selenium")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    with MasterProcess(tmp_path_factory.mktemp("registry-ui") / "master") as m:
        yield m


def _ok(r: Any) -> dict:
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_registry_pages_list_models_and_link_versions_to_their_trial(
    master: MasterProcess, browser: Any, screenshot: Callable[..., None]
) -> None:
    s, api = master.session(), master.url + "/api/v1"
    run = Run(master)
    assert run.metrics("validation", 4, {"loss": 0.25}).status_code == 200
    ckpt = {
        "uuid": str(uuid.uuid4()),
        "taskId": run.task_id,
        "allocationId": run.allocation_id,
        "reportTime": "2024-05-06T07:08:09Z",
        "resources": {"model.pt": "10"},
        "metadata": {"steps_completed": 4},
    }
    assert run.post("/api/v1/checkpoints", json=ckpt).status_code == 200
    _ok(
        s.post(
            api + "/models", json={"name": "vision model", "description": "cnn", "labels": ["prod"]}
        )
    )
    _ok(s.post(api + "/models", json={"name": "old"}))
    _ok(s.post(api + "/models/old/archive"))
    _ok(s.post(api + "/models/vision model/versions", json={"checkpointUuid": ckpt["uuid"]}))

    browser.get(master.url + "/models")
    row = "tr[data-model='vision model']"
    wait_for(browser, lambda: browser.find_element(By.CSS_SELECTOR, row), "the model's row")
    text = browser.find_element(By.CSS_SELECTOR, row).text
    assert "cnn" in text and "prod" in text and "Uncategorized" in text
    assert not browser.find_elements(By.CSS_SELECTOR, "tr[data-model='old']")
    screenshot("models")
    browser.find_element(By.ID, "show-archived").click()
    wait_for(
        browser, lambda: browser.find_element(By.CSS_SELECTOR, "tr[data-model='old']"), "archived"
    )

    browser.find_element(By.CSS_SELECTOR, f"{row} td[data-key='name'] a").click()
    version = "tr[data-version='1']"
    wait_for(browser, lambda: browser.find_element(By.CSS_SELECTOR, version), "version 1")
    assert browser.find_element(By.ID, "title").text == "Model vision model"
    screenshot("model")
    cells = browser.find_element(By.CSS_SELECTOR, version)
    assert ckpt["uuid"] in cells.text and "loss: 0.25" in cells.text
    cells.find_element(By.CSS_SELECTOR, "td[data-key='trial'] a").click()
    wait_for(browser, lambda: browser.current_url.endswith(f"/trials/{run.trial_id}"), "trial page")

    browser.get(master.url + "/models/nope")
    wait_for(browser, lambda: browser.find_element(By.ID, "not-found"), "not found message")


def test_experiment_list_filters_by_project(master: MasterProcess, browser: Any) -> None:
    s, api = master.session(), master.url + "/api/v1"
    ws = _ok(s.post(api + "/workspaces", json={"name": "ui"}))["workspace"]
    proj = _ok(s.post(api + f"/workspaces/{ws['id']}/projects", json={"name": "filtered"}))[
        "project"
    ]
    config = "name: inproj\nentrypoint: python3 train.py\n"
    config += "searcher:\n  name: single\n  metric: loss\n  max_length: 5\n"
    inside = _ok(
        s.post(
            api + "/experiments",
            json={"config": config, "projectId": proj["id"], "activate": False},
        )
    )
    outside = _ok(s.post(api + "/experiments", json={"config": config, "activate": False}))
    in_row = f"tr[data-exp-id='{inside['experiment']['id']}']"
    out_row = f"tr[data-exp-id='{outside['experiment']['id']}']"

    browser.get(master.url + "/")
    wait_for(browser, lambda: browser.find_element(By.CSS_SELECTOR, out_row), "both rows")
    assert "ui / filtered" in browser.find_element(By.CSS_SELECTOR, in_row).text
    Select(browser.find_element(By.ID, "project")).select_by_visible_text("ui / filtered")
    wait_for(browser, lambda: not browser.find_elements(By.CSS_SELECTOR, out_row), "filtered")
    assert browser.find_elements(By.CSS_SELECTOR, in_row)
    assert f"projectId={proj['id']}" in browser.current_url
    browser.refresh()  # the choice survives a reload
    wait_for(browser, lambda: browser.find_element(By.CSS_SELECTOR, in_row), "row after reload")
    assert (
        Select(browser.find_element(By.ID, "project")).first_selected_option.text == "ui / filtered"
    )
    assert not browser.find_elements(By.CSS_SELECTOR, out_row)
