"""0.37's resource-usage reports (``det resources``): the arithmetic as properties, the store's
reads on SQLite and PostgreSQL with exact times, and the routes on a real master that ran an
experiment and a command, read by our CLI and by 0.37's own CLI and bindings."""

from __future__ import annotations

import csv
import datetime
import io
import json
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from _kit.cli import Det
from _kit.reference import Ref
from _kit.trial_cluster import Cluster, config
from hypothesis import given
from hypothesis import strategies as st

from determined.master.api._usage import go_csv, go_time
from determined.master.store import (
    State,
    Store,
    _experiments,
    _projects,
    _tasks,
    _trials,
    _usage,
    sqlite_url,
)
from determined.master.store._schema import (
    allocation_usage,
    allocations,
    checkpoints,
    metrics,
    tasks,
    trials,
)

CLUSTER_CPU_SLOTS = 2
UTC = datetime.timezone.utc
T0 = datetime.datetime(2024, 3, 1, 23, 0, tzinfo=UTC)

moments = st.datetimes(
    min_value=datetime.datetime(2020, 1, 1), max_value=datetime.datetime(2030, 1, 1)
).map(lambda d: d.replace(tzinfo=UTC))
lengths = st.integers(0, 5 * 86400 * 10**6).map(lambda us: datetime.timedelta(microseconds=us))


# ---- the arithmetic ---------------------------------------------------------------------------


@given(start=moments, length=lengths, first=moments, span=st.integers(0, 6))
def test_days_of_an_allocation_sum_to_its_overlap_with_the_range(
    start: datetime.datetime, length: datetime.timedelta, first: datetime.datetime, span: int
) -> None:
    first_day = first.date()
    last_day = first_day + datetime.timedelta(days=span)
    per_day = _usage.daily_seconds(start, start + length, first_day, last_day)
    whole = _usage.overlap_seconds(
        start, start + length, _usage.midnight(first_day), _usage.midnight(last_day + _usage.DAY)
    )
    assert sum(per_day.values()) == pytest.approx(whole, abs=1e-6)
    assert all(first_day <= day <= last_day for day in per_day)
    assert all(0 < secs <= 86400 for secs in per_day.values())


@given(a=moments, a_len=lengths, w=moments, w_len=lengths)
def test_overlap_is_symmetric_and_bounded(
    a: datetime.datetime, a_len: datetime.timedelta, w: datetime.datetime, w_len: datetime.timedelta
) -> None:
    both = _usage.overlap_seconds(a, a + a_len, w, w + w_len)
    assert both == _usage.overlap_seconds(w, w + w_len, a, a + a_len)
    assert 0 <= both <= min(a_len, w_len).total_seconds()
    assert (both > 0) == bool(a < w + w_len and w < a + a_len and a_len and w_len)


kinds = st.sampled_from([None, "training", "validation", "checkpointing"])


@given(events=st.lists(st.tuples(moments, kinds), max_size=12))
def test_spans_chain_consecutive_events(events: list[tuple[datetime.datetime, str | None]]) -> None:
    spans = _usage.workload_spans(events)
    ordered = sorted(e[0] for e in events)
    assert len(spans) == sum(1 for _, kind in sorted(events, key=lambda e: e[0])[1:] if kind)
    assert all(start <= end for _, start, end in spans)
    total = sum((end - start).total_seconds() for _, start, end in spans)
    assert total <= ((ordered[-1] - ordered[0]).total_seconds() if ordered else 0) + 1e-6


def _alloc(start: datetime.datetime, length: datetime.timedelta, slots: int, user: str) -> Any:
    return _usage.Allocation(
        allocation_id=f"{user}.{start}", task_type="TRIAL", username=user, workspace_name="w",
        experiment_id=1, labels=("x",), resource_pool="default", slots=slots, start=start,
        end=start + length,
    )  # fmt: skip


@given(
    allocs=st.lists(
        st.tuples(moments, lengths, st.integers(0, 4), st.sampled_from(["a", "b"])), max_size=6
    ),
    first=moments,
    span=st.integers(0, 40),
)
def test_days_and_months_add_up_to_each_allocations_slot_seconds(
    allocs: list[Any], first: datetime.datetime, span: int
) -> None:
    first_day = first.date()
    last_day = first_day + datetime.timedelta(days=span)
    found = [_alloc(*a) for a in allocs]
    daily = _usage.daily_usage(found, first_day, last_day, now=T0)
    assert list(daily) == list(_usage.days(first_day, last_day))
    low, high = _usage.midnight(first_day), _usage.midnight(last_day + _usage.DAY)
    want = sum(_usage.overlap_seconds(a.start, a.until(T0), low, high) * a.slots for a in found)
    assert sum(u.seconds for u in daily.values()) == pytest.approx(want, abs=1e-5)
    monthly = _usage.monthly_usage(daily)
    assert sum(u.seconds for u in monthly.values()) == pytest.approx(want, abs=1e-5)
    for u in monthly.values():
        assert sum(u.by_username.values()) == pytest.approx(u.seconds, abs=1e-5)
        assert u.by_label.get("x", 0.0) == pytest.approx(u.seconds, abs=1e-5)


def test_go_formats() -> None:
    assert go_time(datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2024-01-02T03:04:05Z"
    when = datetime.datetime(2024, 1, 2, 3, 4, 5, 120000, tzinfo=UTC)
    assert go_time(when) == "2024-01-02T03:04:05.12Z"
    assert go_csv([["a", "b,c", "", ' x"']]) == 'a,"b,c",," x"""\n'


# ---- the store's reads ----------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: pathlib.Path, db_url: str | None) -> Iterator[Store]:
    s = Store(db_url or sqlite_url(tmp_path))
    yield s
    s.close()


def _at(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)


def _seed(store: Store) -> tuple[int, str, str]:
    """An experiment (2 slots per trial, labels) whose one run spans midnight, with a training
    report, a validation and a checkpoint; a command of one slot that ran 30 minutes."""
    cfg = {"labels": ["l1", "a,b"], "resources": {"slots_per_trial": 2}}
    with store.tx() as conn:
        exp = _experiments.insert_experiment(
            conn, config=cfg, original_config="", model_definition=None, owner_id=1
        )
        trial = _trials.insert_trial(
            conn, experiment_id=exp, request_id="r", hparams={}, seed=0, state=State.COMPLETED
        )
        conn.execute(trials.update().values(start_time=_at(-10), end_time=_at(120)))
        alloc = _trials.insert_allocation(conn, trial, [{"slots": 1}, {"slots": 1}])["id"]
        conn.execute(allocations.update().values(start_time=_at(0), end_time=_at(120)))
        conn.execute(allocation_usage.update().values(start_time=_at(0), end_time=_at(120)))
        report = {"trial_id": trial, "trial_run_id": 1, "metrics": {}, "archived": False}
        conn.execute(
            metrics.insert(),
            [
                {**report, "metric_group": "training", "partition": "TRAINING",
                 "steps_completed": 1, "report_time": _at(30)},
                {**report, "metric_group": "validation", "partition": "VALIDATION",
                 "steps_completed": 1, "report_time": _at(90)},
            ],
        )  # fmt: skip
        conn.execute(
            checkpoints.insert().values(
                uuid="u", task_id=f"{exp}.r", trial_id=trial, report_time=_at(100),
                state="COMPLETED", resources={}, metadata={}, size=0, steps_completed=1,
            )
        )  # fmt: skip
        task = _tasks.create(conn, type="COMMAND", owner_id=2, description="c", config={}, slots=1)
        conn.execute(
            tasks.update().values(
                allocation_id=f"{task['id']}.1", state="TERMINATED", start_time=_at(-60),
                end_time=_at(-30),
            )
        )  # fmt: skip
    return exp, alloc, f"{task['id']}.1"


@pytest.mark.both_stores
def test_store_reads_split_runs_into_spans_and_days(store: Store) -> None:
    exp, alloc, command = _seed(store)
    with store.read() as conn:
        found = _usage.allocations_in(conn, _at(-120), _at(200), now=_at(300))
        raw = _usage.raw_entries(conn, _at(45), _at(95))
        first = _usage.first_start(conn)
    assert [(a.allocation_id, a.task_type, a.slots) for a in found] == [
        (command, "COMMAND", 1),
        (alloc, "TRIAL", 2),
    ]
    trial_alloc = found[1]
    assert trial_alloc.username == "admin" and trial_alloc.experiment_id == exp
    assert trial_alloc.labels == ("l1", "a,b") and trial_alloc.workspace_name == "Uncategorized"
    assert found[0].username == "determined" and found[0].experiment_id is None
    assert first == _at(-60)
    # training 0..30 falls before the window; validation 30..90 and checkpointing 90..100 meet it
    assert [(e.kind, e.start, e.end, e.seconds, e.slots) for e in raw] == [
        ("validation", _at(30), _at(90), 45 * 60, 2),
        ("checkpointing", _at(90), _at(100), 5 * 60, 2),
    ]
    daily = _usage.daily_usage(found, T0.date(), T0.date() + _usage.DAY, now=_at(300))
    day1, day2 = daily[T0.date()], daily[T0.date() + _usage.DAY]
    assert day1.seconds == 60 * 60 * 2 + 30 * 60  # 23:00-24:00 on 2 slots, the command's half hour
    assert day2.seconds == 60 * 60 * 2
    assert day1.by_username == {"admin": 7200.0, "determined": 1800.0}
    assert day2.by_label == {"l1": 7200.0, "a,b": 7200.0} and day2.by_pool == {"default": 7200.0}


@pytest.mark.both_stores
def test_a_run_keeps_its_workspace_and_outlives_its_experiment(store: Store) -> None:
    """0.37 reports the workspace a run ran in, and keeps the runs of a deleted experiment."""
    with store.tx() as conn:
        ws = _projects.insert_workspace(conn, "first", 1)
        project = _projects.insert_project(conn, name="p", workspace_id=ws, user_id=1)
        exp = _experiments.insert_experiment(
            conn, config={}, original_config="", model_definition=None, owner_id=1,
            project_id=project,
        )  # fmt: skip
        trial = _trials.insert_trial(
            conn, experiment_id=exp, request_id="r", hparams={}, seed=0, state=State.ACTIVE
        )
        alloc = _trials.insert_allocation(conn, trial, [{"slots": 1}])["id"]
        _trials.update_allocation(conn, alloc, end_time=datetime.datetime.now(UTC))
        _projects.update_workspace(conn, ws, name="renamed")
        _experiments.delete_experiment(conn, exp)
    with store.read() as conn:
        window = (T0 - datetime.timedelta(days=36500), datetime.datetime.now(UTC))
        found = _usage.allocations_in(conn, *window, now=window[1])
    assert [(a.allocation_id, a.experiment_id, a.workspace_name) for a in found] == [
        (alloc, exp, "first")
    ]
    assert found[0].end is not None and found[0].username == "admin"


@pytest.mark.both_stores
def test_migration_0026_records_the_runs_there_were(store: Store) -> None:
    """Runs from before ``allocation_usage`` are recorded by the migration that adds it."""
    from alembic import command
    from alembic.config import Config

    from determined.master.store._engine import _MIGRATIONS

    exp, alloc, _ = _seed(store)
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0025")
        command.upgrade(cfg, "head")
    with store.read() as conn:
        [row] = conn.execute(sa.select(allocation_usage)).mappings().all()
    assert (row["allocation_id"], row["experiment_id"], row["workspace_name"]) == (
        alloc, exp, "Uncategorized"
    )  # fmt: skip
    assert (row["slots"], row["resource_pool"], row["owner_id"]) == (2, "default", 1)
    assert row["end_time"] is not None


# ---- the routes, on a real master -----------------------------------------------------------


def _det(cluster: Cluster, home: pathlib.Path, *args: str) -> str:
    return Det(home, cluster.url, user="admin").ok(*args)


def _stamp(when: datetime.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _ran(cluster: Cluster, tmp_path: pathlib.Path) -> tuple[int, str]:
    """An experiment with labels and a command, both ended."""
    cfg = {**config(tmp_path / "out", max_length=2), "labels": ["usage-a", "b,c"]}
    exp = cluster.create(cfg)
    r = cluster.s.post(cluster.url + "/api/v1/commands", json={"config": {"entrypoint": "sleep 1"}})
    assert r.status_code == 200, r.text
    task_id = r.json()["command"]["id"]
    cluster.wait_experiment(exp, "STATE_COMPLETED", timeout=60)
    deadline = time.monotonic() + 30
    while cluster.get(f"/api/v1/commands/{task_id}")["command"]["state"] != "STATE_TERMINATED":
        assert time.monotonic() < deadline, "the command did not end"
        time.sleep(0.2)
    return exp, task_id


REF_BINDINGS = r"""
import json, sys
from determined.common.api import authentication, bindings
url, after, before, day = sys.argv[1:]
sess = authentication.login(url, "determined", "")
raw = bindings.get_ResourceAllocationRaw(sess, timestampAfter=after, timestampBefore=before)
agg = bindings.get_ResourceAllocationAggregated(
    sess, startDate=day, endDate=day,
    period=bindings.v1ResourceAllocationAggregationPeriod.DAILY)
print(json.dumps({"raw": len(raw.resourceEntries),
                  "agg": [e.seconds for e in agg.resourceEntries]}))
"""


@pytest.mark.e2e
def test_reports_of_an_experiment_and_a_command(cluster: Cluster, tmp_path: pathlib.Path) -> None:
    began = datetime.datetime.now(UTC) - datetime.timedelta(minutes=1)
    exp, task_id = _ran(cluster, tmp_path)
    ended = datetime.datetime.now(UTC) + datetime.timedelta(minutes=1)
    window = {"timestamp_after": _stamp(began), "timestamp_before": _stamp(ended)}

    r = cluster.s.get(cluster.url + "/resources/allocation/allocations-csv", params=window)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv"), r.text
    assert r.text.splitlines()[0] == (
        "allocation_id,task_type,username,workspace_name,experiment_id,slots,start_time,"
        "end_time,imagepulling_time,slot_hours,resource_pool"
    )
    rows = {row["task_type"]: row for row in _rows(r.text)}
    trial = rows["TRIAL"]
    assert trial["username"] == "admin" and trial["experiment_id"] == str(exp)
    assert trial["workspace_name"] == "Uncategorized" and trial["resource_pool"] == "default"
    assert float(trial["slot_hours"]) > 0 and trial["imagepulling_time"] == "0.0"
    assert rows["COMMAND"]["allocation_id"] == f"{task_id}.1"
    assert rows["COMMAND"]["experiment_id"] == "" and float(rows["COMMAND"]["slot_hours"]) > 0
    slot_seconds = sum(float(row["slot_hours"]) * 3600 for row in rows.values())
    run_length = (
        datetime.datetime.fromisoformat(trial["end_time"])
        - datetime.datetime.fromisoformat(trial["start_time"])
    ).total_seconds()

    raw = cluster.s.get(cluster.url + "/api/v1/resources/allocation/raw", params=window).json()
    entries = [e for e in raw["resourceEntries"] if e["experimentId"] == exp]
    assert {"training", "validation", "checkpointing"} <= {e["kind"] for e in entries}
    assert 0 < sum(e["seconds"] for e in entries) <= run_length + 1e-3
    assert all(e["labels"] == ["usage-a", "b,c"] and e["username"] == "admin" for e in entries)
    raw_csv = cluster.s.get(cluster.url + "/resources/allocation/raw", params=window).text
    assert len(_rows(raw_csv)) == len(raw["resourceEntries"])
    assert _rows(raw_csv)[0]["labels"] == "usage-a,b\\,c"

    days = {"start_date": began.date().isoformat(), "end_date": ended.date().isoformat()}
    daily = cluster.s.get(
        cluster.url + "/api/v1/resources/allocation/aggregated",
        params={**days, "period": "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY"},
    ).json()["resourceEntries"]
    assert sum(e["seconds"] for e in daily) == pytest.approx(slot_seconds, abs=0.05)
    labels = {k for e in daily for k in e["byExperimentLabel"]}
    assert labels == {"usage-a", "b,c"}
    assert {k for e in daily for k in e["byUsername"]} == {"admin"}
    months = {k: v[:7] for k, v in days.items()}
    agg = cluster.s.get(
        cluster.url + "/resources/allocation/aggregated",
        params={**months, "period": "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_MONTHLY"},
    )
    assert agg.status_code == 200, agg.text
    agg_csv = agg.text
    totals = [row for row in _rows(agg_csv) if row["aggregation_type"] == "total"]
    assert sum(float(row["seconds"]) for row in totals) == pytest.approx(slot_seconds, abs=0.05)

    _bad_requests(cluster, window)
    _clis(cluster, tmp_path, window, days, exp)


def _bad_requests(cluster: Cluster, window: dict[str, str]) -> None:
    url = cluster.url + "/resources/allocation/allocations-csv"
    bad = cluster.s.get(url, params={**window, "timestamp_after": "yesterday"})
    assert bad.status_code == 400 and "invalid start time" in bad.text
    swapped = {
        "timestamp_after": window["timestamp_before"],
        "timestamp_before": window["timestamp_after"],
    }
    for path in ("/resources/allocation/allocations-csv", "/api/v1/resources/allocation/raw"):
        r = cluster.s.get(cluster.url + path, params=swapped)
        assert r.status_code == 400 and "start time cannot be after end time" in r.text
    r = cluster.s.get(
        cluster.url + "/api/v1/resources/allocation/aggregated",
        params={"start_date": "2024-13-01", "end_date": "2024-12-01", "period": "1"},
    )
    assert r.status_code == 400 and "invalid start date" in r.text


def _ref(ref: Ref, *args: str) -> str:
    """0.37's ``det`` output without the warning about the blank password it logs in with."""
    return ref.det(*args).split("Warning: your password")[0]


def _clis(
    cluster: Cluster,
    tmp_path: pathlib.Path,
    window: dict[str, str],
    days: dict[str, str],
    exp: int,
) -> None:
    after, before = window["timestamp_after"], window["timestamp_before"]
    ref = Ref(cluster.master, tmp_path / "ref")
    listed = _rows(_ref(ref, "res", "alloc", after, before))
    assert {row["task_type"] for row in listed} == {"TRIAL", "COMMAND"}
    raw = json.loads(_ref(ref, "res", "raw", after, before, "--json"))
    assert any(e["experimentId"] == exp for e in raw["resourceEntries"])
    agg = json.loads(_ref(ref, "res", "agg", days["start_date"], days["end_date"], "--json"))
    assert agg["resourceEntries"][-1]["seconds"] > 0
    got = ref.python(REF_BINDINGS, after, before, days["end_date"])
    assert got["raw"] == len(raw["resourceEntries"]) and got["agg"][0] > 0

    home = tmp_path / "home"
    ours = _rows(_det(cluster, home, "resources", "allocations", after, before))
    assert [row["allocation_id"] for row in ours] == [row["allocation_id"] for row in listed]
    assert json.loads(_det(cluster, home, "res", "raw", after, before, "--json")) == raw
    monthly = json.loads(
        _det(cluster, home, "res", "agg", "--monthly", "--json", days["start_date"][:7],
             days["end_date"][:7])
    )  # fmt: skip
    assert monthly["resourceEntries"][0]["period"] == (
        "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_MONTHLY"
    )
