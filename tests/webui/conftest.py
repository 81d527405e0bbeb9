"""A real master (local resource manager, CPU slots) with real experiments, and headless
Chromium driven by Selenium, for the web UI's end-to-end tests.

The browser tests skip, saying why, when Chromium, its driver or selenium is missing
(``scripts/setup.sh --tests`` installs all three).
"""

from __future__ import annotations

import os
import pathlib
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from _kit.master import MasterProcess
from _kit.webui import Cluster, random_config


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master with 2 CPU slots and experiment ``done`` (random, 2 trials of 6 batches,
    finished) already run."""
    with MasterProcess(tmp_path_factory.mktemp("webui") / "master", cpu_slots=2) as m:
        c = Cluster(m)
        c.done = c.create(random_config("webui-done", max_trials=2, max_length=6))
        c.wait_state(c.done, "STATE_COMPLETED")
        yield c


def _chromium() -> tuple[str, str] | str:
    """(browser, driver) paths, or why the browser tests cannot run."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (scripts/setup.sh --tests installs it)"
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not browser or not driver:
        return "Debian's chromium and chromium-driver are not installed (scripts/setup.sh --tests)"
    return browser, driver


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Chromium (Selenium), 1280x900."""
    found = _chromium()
    if isinstance(found, str):
        pytest.skip(found)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = found[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    opts.add_argument("--window-size=1280,900")
    driver = webdriver.Chrome(options=opts, service=Service(found[1]))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def screenshot(browser: Any) -> Any:
    """``screenshot(name)`` saves a full-page PNG to ``$WEBUI_SCREENSHOTS/<name>.png`` when that
    variable names a directory (scripts/webui_screenshots.sh sets it to docs/webui);
    ``screenshot(name, full_page=False)`` only the top 1280x900."""
    where = os.environ.get("WEBUI_SCREENSHOTS")

    def take(name: str, full_page: bool = True) -> None:
        if not where:
            return
        pathlib.Path(where).mkdir(parents=True, exist_ok=True)
        browser.execute_script("window.scrollTo(0, 0)")
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(1280, max(900, int(height) + 40) if full_page else 900)
        browser.save_screenshot(str(pathlib.Path(where) / f"{name}.png"))
        browser.set_window_size(1280, 900)

    return take
