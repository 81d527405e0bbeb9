"""The web UI's cluster page in headless Chromium: agents and slots with their states, drain,
disable and enable reaching the master (admins only: the default user sees why not), and the
job queue."""

from __future__ import annotations

import pathlib
import socket
from typing import Any

import pytest
from _kit.master import MasterProcess
from _kit.webui import wait_for

pytestmark = pytest.mark.e2e

pytest.importorskip("selenium")
from selenium.webdriver.common.by import By  # noqa: E402


def _state(browser: Any, selector: str) -> str:
    """The row's state; the page redraws every 2 s, so a stale row is looked up again."""
    return str(
        wait_for(
            browser,
            lambda: browser.find_element(By.CSS_SELECTOR, selector).get_attribute("data-state"),
            f"the state of {selector}",
        )
    )


def _click(browser: Any, action: str, target: str) -> None:
    button = f"button[data-action='{action}'][data-target='{target}']"
    wait_for(
        browser,
        lambda: browser.find_element(By.CSS_SELECTOR, button).click() or True,
        f"a {action} button for {target}",
    )


def test_cluster_page_toggles_agents_and_slots(tmp_path: pathlib.Path, browser: Any) -> None:
    host = socket.gethostname()
    a0 = f"{host}-0"
    with MasterProcess(tmp_path / "master", cpu_slots=2, slots_per_agent=1) as master:
        browser.get(master.url + "/cluster")
        row = f"tr[data-agent-id='{a0}']"
        wait_for(browser, lambda: browser.find_element(By.CSS_SELECTOR, row), "the agent rows")
        assert len(browser.find_elements(By.CSS_SELECTOR, "tr.agent-row")) == 2
        assert _state(browser, row) == "enabled"
        assert "2 available slots" in browser.find_element(By.ID, "pool").text
        assert "No jobs" in browser.find_element(By.ID, "jobs").text
        # The isolation in force (issue #35; this master was started without a sandbox).
        shown = browser.find_element(By.ID, "isolation")
        assert shown.get_attribute("data-mode") == "none" and "Task isolation" in shown.text

        # The default user is no admin: the page says why and nothing changes.
        browser.find_element(
            By.CSS_SELECTOR, f"button[data-action='drain'][data-target='{a0}']"
        ).click()
        wait_for(
            browser, lambda: "only an admin" in browser.find_element(By.ID, "error").text, "why"
        )
        assert _state(browser, row) == "enabled"

        # As an admin: drain the agent, disable a slot (after the confirmation), enable both.
        browser.execute_async_script(
            "const done = arguments[0]; login('admin', '').then(() => done(), () => done());"
        )
        browser.get(master.url + "/cluster")
        _click(browser, "drain", a0)
        wait_for(browser, lambda: _state(browser, row) == "draining", "the agent draining")
        slot = f"tr[data-slot='{host}-1/1']"
        _click(browser, "disable", f"{host}-1/slots/1")
        browser.switch_to.alert.accept()
        wait_for(browser, lambda: _state(browser, slot) == "disabled", "the slot disabled")
        wait_for(browser, lambda: "0 available" in browser.find_element(By.ID, "pool").text, "0")
        agents = master.session().get(master.url + "/api/v1/agents").json()["agents"]
        states = {a["id"]: (a["enabled"], a["draining"]) for a in agents}
        assert states[a0] == (False, True)
        assert agents[1]["slots"]["1"]["enabled"] is False
        for target in (a0, f"{host}-1/slots/1"):
            _click(browser, "enable", target)
        wait_for(browser, lambda: _state(browser, slot) == "enabled", "the slot enabled")
        wait_for(browser, lambda: _state(browser, row) == "enabled", "the agent enabled")
