"""The web UI at common sizes, in headless Chromium: nothing runs off the side at 1280 and 1440
px, learning curves of 16, 64 and 200 trials keep distinct colours and a legend that hides,
shows and highlights each, and a missing experiment or trial gets one message.

The 64-trial search is reported by hand over the dev endpoints of a master without a resource
manager (``report_by_hand``), so it takes seconds; the pages read it like any other."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from _kit.master import MasterProcess
from _kit.webui import (
    WIDE_STEPS,
    chart_series,
    report_by_hand,
    wait_for,
    wide_loss,
    wide_search,
)

pytestmark = pytest.mark.e2e

pytest.importorskip("selenium")
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402

WIDTHS = (1280, 1440)
LONG_NAME = "mnist_pytorch_random_search_with_a_rather_long_name"


@dataclasses.dataclass
class Wide:
    url: str
    exp: int
    trials: list[dict[str, Any]]


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wide]:
    """A master with three 64-trial searches over six hyperparameters, all ACTIVE (so every
    row of the list has a Kill button); ``exp`` is the last, with its trials."""
    with MasterProcess(tmp_path_factory.mktemp("webui-wide") / "master") as m:
        for i in range(2):
            body = {"config": yaml.safe_dump(wide_search(f"{LONG_NAME}_{i}", 2))}
            assert m.session().post(m.url + "/api/v1/experiments", json=body).status_code == 200
        exp = report_by_hand(m, wide_search(LONG_NAME, 64))
        trials = m.session().get(m.url + f"/api/v1/experiments/{exp}/trials").json()["trials"]
        assert len(trials) == 64
        yield Wide(m.url, exp, trials)


def lab(hex_colour: str) -> tuple[float, float, float]:
    """CIELAB (D65) of an sRGB ``#rrggbb``."""
    rgb = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def closest_pair(colours: list[str]) -> float:
    """The smallest CIELAB ΔE (1976) between two of ``colours``."""
    return min(math.dist(lab(a), lab(b)) for a, b in itertools.combinations(colours, 2))


# What overflows sideways: the page itself, any table box that needs scrolling, and each
# element matching the given selector that ends past the right edge of the window.
OVERFLOW_JS = """
const de = document.documentElement, w = de.clientWidth;
const out = [];
if (de.scrollWidth > w) out.push(`page ${de.scrollWidth} > ${w}`);
for (const t of document.querySelectorAll('.table-wrap'))
  if (t.scrollWidth > t.clientWidth) out.push(`table ${t.scrollWidth} > ${t.clientWidth}`);
for (const n of document.querySelectorAll(arguments[0])) {
  const r = n.getBoundingClientRect();
  if (r.right > w || r.width === 0) out.push(`${n.tagName} ${n.textContent} ends at ${r.right}`);
}
return out;
"""


def test_no_sideways_overflow_at_1280_and_1440(wide: Wide, browser: Any) -> None:
    trial = wide.trials[0]["id"]
    last_hp = "th[data-key='hp:n_filters2']"
    pages = [
        ("/", f"tr[data-exp-id='{wide.exp}'] [data-action='kill']", "[data-action='kill']"),
        (f"/experiments/{wide.exp}", "#trials tbody tr", f"#summary button, {last_hp}"),
        (f"/trials/{trial}", "#hparams tr[data-hparam='n_filters2']", "#summary button, #hparams"),
    ]
    try:
        for width in WIDTHS:
            browser.set_window_size(width, 900)
            for path, ready, targets in pages:
                browser.get(wide.url + path)
                wait_for(browser, lambda r=ready: browser.find_element(By.CSS_SELECTOR, r), path)
                assert browser.find_elements(By.CSS_SELECTOR, targets), (path, targets)
                problems = browser.execute_script(OVERFLOW_JS, targets)
                assert problems == [], f"{path} at {width} px: {problems}"
                if path == "/":  # three rows, each with its Kill button in view
                    assert len(browser.find_elements(By.CSS_SELECTOR, targets)) == 3
    finally:
        browser.set_window_size(1280, 900)


def legend_state(browser: Any) -> dict[str, Any]:
    return dict(
        browser.execute_script(
            "const u = document.getElementById('learning-curve')._plot;"
            "return {show: u.series.slice(1).map(s => s.show),"
            " alpha: u.series.slice(1).map(s => s.alpha),"
            " width: u.series.slice(1).map(s => s.width),"
            " labels: u.series.slice(1).map(s => s.label)};"
        )
    )


def test_learning_curves_of_64_trials_keep_a_usable_legend(
    wide: Wide, browser: Any, screenshot: Callable[..., None]
) -> None:
    browser.get(f"{wide.url}/experiments/{wide.exp}")
    wait_for(browser, lambda: len(chart_series(browser, "learning-curve")) == 64, "64 curves")
    curves = chart_series(browser, "learning-curve")
    for t in wide.trials:
        got = curves[f"trial {t['id']}"]
        assert [p[0] for p in got] == list(WIDE_STEPS)
        assert [p[1] for p in got] == pytest.approx(
            [wide_loss(t["hparams"]["lr"], s) for s in WIDE_STEPS]
        )
    colours = json.loads(browser.find_element(By.ID, "learning-curve").get_attribute("data-colors"))
    assert len(set(colours.values())) == 64
    assert closest_pair(list(colours.values())) > 8
    items = browser.find_elements(By.CSS_SELECTOR, "#learning-curve .legend-item")
    assert [i.get_attribute("data-series") for i in items] == list(curves)
    box = browser.find_element(By.CSS_SELECTOR, "#learning-curve .legend-items")
    assert box.size["height"] < 110  # 64 entries scroll in a short box, the page stays short
    screenshot("experiment-64", full_page=False)

    # clicking an entry hides its line; clicking again shows it; hidden survives a redraw
    items[5].click()
    assert legend_state(browser)["show"][5] is False
    assert "off" in items[5].get_attribute("class")
    browser.execute_script("refresh(true)")
    wait_for(browser, lambda: EC.staleness_of(items[0])(browser), "the redrawn legend")
    assert legend_state(browser)["show"][5] is False
    items = browser.find_elements(By.CSS_SELECTOR, "#learning-curve .legend-item")
    items[5].click()
    assert all(legend_state(browser)["show"])

    # hovering an entry highlights its line: drawn wider, every other line dimmed
    ActionChains(browser).move_to_element(items[7]).perform()
    wait_for(browser, lambda: legend_state(browser)["width"][7] == 3, "highlight")
    state = legend_state(browser)
    assert state["alpha"][7] == 1 and {a for i, a in enumerate(state["alpha"]) if i != 7} == {0.12}
    assert {w for i, w in enumerate(state["width"]) if i != 7} == {1.2}
    assert "focus" in items[7].get_attribute("class")
    ActionChains(browser).move_to_element(browser.find_element(By.ID, "title")).perform()
    wait_for(browser, lambda: set(legend_state(browser)["alpha"]) == {1}, "highlight gone")

    # "best 10" leaves the ten best trials by the searcher metric; "none" and "all"
    best = sorted(wide.trials, key=lambda t: t["searcherMetricValue"])[:10]
    browser.find_element(By.CSS_SELECTOR, "#learning-curve [data-pick='best 10']").click()
    state = legend_state(browser)
    shown = {label for label, on in zip(state["labels"], state["show"], strict=True) if on}
    assert shown == {f"trial {t['id']}" for t in best}
    browser.find_element(By.CSS_SELECTOR, "#learning-curve [data-pick='none']").click()
    assert not any(legend_state(browser)["show"])
    browser.find_element(By.CSS_SELECTOR, "#learning-curve [data-pick='all']").click()
    assert all(legend_state(browser)["show"])


@pytest.mark.parametrize(("n", "apart"), [(16, 15), (200, 2.5)])
def test_colours_and_legend_of_16_and_200_series(
    wide: Wide, browser: Any, n: int, apart: float
) -> None:
    """The same chart code drawing n synthetic series in a chart added to the page."""
    browser.get(f"{wide.url}/experiments/{wide.exp}")
    wait_for(browser, lambda: chart_series(browser, "learning-curve"), "the page's charts")
    colours = browser.execute_script(
        "const c = el('div', {class: 'chart', id: 'synthetic'});"
        "document.querySelector('main').append(c);"
        "const series = Array.from({length: arguments[0]}, (_, i) =>"
        "  ({label: `s${i}`, points: [[1, i], [2, i / 2], [3, i / 3]]}));"
        "drawChart(c, series, {best: series.map(s => s.label)});"
        "return Object.values(JSON.parse(c.dataset.colors));",
        n,
    )
    assert len(colours) == len(set(colours)) == n
    assert closest_pair(colours) > apart
    items = browser.find_elements(By.CSS_SELECTOR, "#synthetic .legend-item")
    assert len(items) == n
    box = browser.find_element(By.CSS_SELECTOR, "#synthetic .legend-items")
    assert box.size["height"] < 110
    items[-1].click()  # the last entry (scrolled into view) hides the last series
    hidden = browser.execute_script(
        "return document.getElementById('synthetic')._plot.series.filter(s => !s.show).length"
    )
    assert hidden == 1


@pytest.mark.parametrize("path", ["/experiments/987654", "/experiments/abc", "/trials/987654"])
def test_missing_experiment_or_trial_shows_one_message(wide: Wide, browser: Any, path: str) -> None:
    browser.get(wide.url + path)
    wait_for(browser, lambda: browser.find_element(By.ID, "not-found"), "the not-found message")
    kind, what = path.split("/")[1:]
    name = f"{'Experiment' if kind == 'experiments' else 'Trial'} {what}"
    assert browser.find_element(By.TAG_NAME, "h1").text == f"{name} not found"
    assert browser.title.startswith(f"{name} not found")
    # nothing else: no empty panels, no error line
    page = browser.find_element(By.ID, "page")
    children = page.find_elements(By.XPATH, "./*")
    assert [c.tag_name for c in children] == ["h1", "div"]
    assert len(browser.find_elements(By.CSS_SELECTOR, ".card")) == 1
    assert not browser.find_elements(By.CSS_SELECTOR, "#error, #summary, .chart")
    link = browser.find_element(By.CSS_SELECTOR, "#not-found a")
    assert link.get_attribute("href") == wide.url + "/"
