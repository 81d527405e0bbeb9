"""benchmarks/master_metrics.py's ``--seed-trials``: a large cluster's history, created through a
real master's API and written into its database as the store writes batched reports, reads back
through the API as reported history does (summaries, series, the experiment list), on SQLite and
PostgreSQL."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

import pytest
from _kit.master import MasterProcess, login

pytestmark = [pytest.mark.e2e, pytest.mark.both_stores]


def _bench() -> ModuleType:
    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "master_metrics.py"
    spec = importlib.util.spec_from_file_location("master_metrics", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["master_metrics"] = module
    spec.loader.exec_module(module)
    return module


def test_seeded_history_reads_back_as_reported_history(master: MasterProcess) -> None:
    bench = _bench()
    admin = login(master.url, "admin")
    seeded = bench.seed(master.url, admin, master.store_url, n=12, per=4, points=30)
    assert len(seeded) == 12
    experiments = {t["experiment"] for t in seeded}
    assert len(experiments) == 3
    s = master.session(admin)
    listed = s.get(master.url + "/api/v1/experiments?limit=200").json()["experiments"]
    assert {e["id"] for e in listed} >= experiments
    assert all(e["numTrials"] == 4 for e in listed if e["id"] in experiments)
    # Each trial's newest validation is its best (and latest), and so the experiment's best.
    best = [e["bestTrialSearcherMetric"] for e in listed if e["id"] in experiments]
    assert best == [pytest.approx(1.1 / 30)] * 3
    for t in seeded[:: len(seeded) - 1]:  # the first and the last
        trial = s.get(master.url + f"/api/v1/trials/{t['id']}").json()["trial"]
        summary = trial["summaryMetrics"]
        assert summary["avg_metrics"]["loss"]["count"] == 30
        assert summary["avg_metrics"]["loss"]["min"] == pytest.approx(1.0 / 30)
        assert summary["validation_metrics"]["accuracy"]["count"] == 3
        assert trial["totalBatchesProcessed"] == 30
        for which in ("bestValidation", "latestValidation"):
            assert trial[which]["totalBatches"] == 30
            assert trial[which]["metrics"]["avgMetrics"]["loss"] == pytest.approx(1.1 / 30)
        series = s.get(
            master.url + f"/api/v1/trials/time-series?trialIds={t['id']}"
            "&metricType=METRIC_TYPE_TRAINING&metricNames=loss&maxDatapoints=200"
        ).json()
        steps = [p["batches"] for p in series["trials"][0]["metrics"][0]["data"]]
        assert steps == list(range(1, 31))
