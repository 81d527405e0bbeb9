"""The web UI's Tasks page (issue #21): a running notebook is listed with Open and Kill; Open
loads JupyterLab's own UI in headless Chromium through the master's proxy (the page hands the
proxy the login as its ``auth`` cookie); Kill ends the notebook."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from _kit.master import MasterProcess, login
from _kit.tasks import proxied, wait_state
from _kit.trial_cluster import Cluster
from _kit.webui import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def task_cluster(tmp_path: pathlib.Path) -> Iterator[Cluster]:
    with MasterProcess(tmp_path / "master", cpu_slots=1) as m:
        yield Cluster(m)


def test_open_and_kill_a_notebook_from_the_tasks_page(task_cluster: Cluster, browser: Any) -> None:
    pytest.importorskip("jupyterlab")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC  # noqa: N812
    from selenium.webdriver.support.ui import WebDriverWait

    cluster = task_cluster
    # The page logs in as "determined" (the default user): the notebook is that user's.
    determined = cluster.master.session(login(cluster.url, "determined"))
    nb = determined.post(cluster.url + "/api/v1/notebooks", json={}).json()["notebook"]
    wait_state(cluster, "notebook", nb["id"], "STATE_RUNNING")
    proxied(cluster, f"/proxy/{nb['id']}/api/status", timeout=90)
    browser.get(cluster.url + "/tasks")
    row = f"tr[data-task-id='{nb['id']}']"
    wait_for(
        browser,
        lambda: browser.find_element(By.CSS_SELECTOR, f"{row} a[data-action='open']"),
        "open",
    )
    # The page redraws its table as it polls: each step finds its element anew (a stale one
    # counts as not yet).
    wait_for(browser, lambda: "Notebook" in browser.find_element(By.CSS_SELECTOR, row).text, "row")
    tasks_tab = browser.current_window_handle

    def click(selector: str) -> bool:
        browser.find_element(By.CSS_SELECTOR, selector).click()
        return True

    wait_for(browser, lambda: click(f"{row} a[data-action='open']"), "open click")
    WebDriverWait(browser, 10).until(lambda b: len(b.window_handles) > 1)
    browser.switch_to.window([h for h in browser.window_handles if h != tasks_tab][0])
    try:
        # JupyterLab's own application shell, rendered by its JavaScript.
        wait_for(browser, lambda: browser.find_element(By.ID, "jp-main-dock-panel"), "lab", 60)
        assert f"/proxy/{nb['id']}/lab" in browser.current_url
    finally:
        browser.close()
        browser.switch_to.window(tasks_tab)
    wait_for(browser, lambda: click(f"{row} button[data-action='kill']"), "kill click")
    WebDriverWait(browser, 5).until(EC.alert_is_present())
    browser.switch_to.alert.accept()
    wait_state(cluster, "notebook", nb["id"], "STATE_TERMINATED")
