"""Reads 0.37's clients rely on (issue #20 item 7): ``GET /api/v1/trials/time-series`` (0.37's
``CompareTrials``, read with 0.37's own bindings), fixed paths that no ``{id}`` route in front
of them captures, ``limit=-1`` meaning "all" on the listings, and 404 for an unknown task's
logs."""

from __future__ import annotations

import pathlib
import re
from collections.abc import Iterator
from typing import Any

import pytest
from _kit.master import MasterProcess
from _kit.reference import REF, Ref
from _kit.trial_cluster import Cluster, config
from fastapi.routing import APIRoute
from hypothesis import given
from hypothesis import strategies as st

from determined.master._errors import InvalidArgument
from determined.master.api import ROUTERS
from determined.master.api._time_series import downsample, metric_groups

BINDINGS = next(REF.glob("lib/python3*/site-packages/determined/common/api/bindings.py"), None)


def _fixed_paths() -> list[tuple[str, str]]:
    """(method, path) of every 0.37 route whose path has no parameter."""
    assert BINDINGS is not None
    text = BINDINGS.read_text()
    return sorted(set(re.findall(r'method="(\w+)",\s*path="(/api/v1/[^"{]+)"', text)))


@pytest.mark.skipif(BINDINGS is None, reason="no .refvenv: run scripts/setup.sh --tests")
def test_no_parameter_route_captures_a_fixed_path() -> None:
    routes = [r for router in ROUTERS for r in router.routes if isinstance(r, APIRoute)]
    served = 0
    for method, path in _fixed_paths():
        matching = [r for r in routes if method in r.methods and r.path_regex.match(path)]
        if not any(r.path == path for r in matching):
            continue  # a route we do not serve (yet)
        served += 1
        assert matching[0].path == path, f"{method} {path} goes to {matching[0].path}"
    assert served >= 20


@given(st.lists(st.integers(), max_size=300), st.integers(min_value=0, max_value=50))
def test_downsample_keeps_the_ends_and_the_order(points: list[int], most: int) -> None:
    picked = downsample(list(enumerate(points)), most)
    if most == 0 or len(points) <= most:
        assert picked == list(enumerate(points))
        return
    assert len(picked) == most
    assert picked[-1] == (len(points) - 1, points[-1])
    assert most == 1 or picked[0] == (0, points[0])
    assert [i for i, _ in picked] == sorted({i for i, _ in picked})


def test_metric_groups_follow_the_reference() -> None:
    assert metric_groups(["loss"], [], "", "METRIC_TYPE_UNSPECIFIED") == {
        "training": ["loss"],
        "validation": ["loss"],
    }
    assert metric_groups(["a"], [], "", "METRIC_TYPE_VALIDATION") == {"validation": ["a"]}
    ids = ["gen.x", "gen.y", "training.loss"]
    assert metric_groups([], ids, "", "METRIC_TYPE_UNSPECIFIED") == {
        "gen": ["x", "y"],
        "training": ["loss"],
    }
    with pytest.raises(InvalidArgument, match="metricType must be one of"):
        metric_groups(["a"], [], "", "TRAINING")
    with pytest.raises(InvalidArgument, match="either group or the legacy metricType"):
        metric_groups(["a"], [], "training", "METRIC_TYPE_VALIDATION")
    with pytest.raises(InvalidArgument, match="'group.name'"):
        metric_groups([], ["loss"], "", "METRIC_TYPE_UNSPECIFIED")
    with pytest.raises(InvalidArgument, match="metricNames or metricIds"):
        metric_groups(["a"], ["training.a"], "", "METRIC_TYPE_UNSPECIFIED")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    m = MasterProcess(tmp_path_factory.mktemp("reads") / "master", cpu_slots=1)
    m.start()
    yield Cluster(m)
    m.stop()


@pytest.fixture(scope="module")
def trained(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> list[int]:
    """Two completed experiments' trial ids (6 and 3 training steps)."""
    out = tmp_path_factory.mktemp("reads-out")
    ids = [cluster.create(config(out, max_length=n)) for n in (6, 3)]
    for exp_id in ids:
        cluster.wait_experiment(exp_id, "STATE_COMPLETED")
    return [cluster.trials(exp_id)[0]["id"] for exp_id in ids]


REF_COMPARE = r"""
import json, sys
from determined.common.api import authentication, bindings

sess = authentication.login(sys.argv[1], "admin", "")
ids = [int(x) for x in sys.argv[2].split(",")]
resp = bindings.get_CompareTrials(sess, trialIds=ids, metricNames=["loss"], maxDatapoints=3)
print(json.dumps([
    [t.trial.id, [[m.group, m.type.value, [[d.batches, d.values] for d in m.data]]
                  for m in t.metrics]]
    for t in resp.trials]))
"""


@pytest.mark.e2e
@pytest.mark.skipif(not REF.exists(), reason="no .refvenv: run scripts/setup.sh --tests")
def test_reference_compare_trials(
    cluster: Cluster, trained: list[int], tmp_path: pathlib.Path
) -> None:
    a, b = trained
    got = Ref(cluster.master, tmp_path / "home").python(REF_COMPARE, f"{a},{b}")
    assert [t[0] for t in got] == [a, b]
    (ta, va), (tb, vb) = got[0][1], got[1][1]
    # Training of a: 6 points thinned to 3, the first and last kept.
    assert ta[:2] == ["training", "METRIC_TYPE_TRAINING"]
    assert [d[0] for d in ta[2]] == [1, 3, 6]
    assert ta[2][-1] == [6, {"loss": 1 / 6}]
    assert va == ["validation", "METRIC_TYPE_VALIDATION", [[6, {"loss": 1 / 6}]]]
    assert [d[0] for d in tb[2]] == [1, 2, 3]
    assert vb[0] == "validation"


@pytest.mark.e2e
def test_time_series_by_metric_ids_and_ranges(cluster: Cluster, trained: list[int]) -> None:
    a, _ = trained
    url = f"{cluster.url}/api/v1/trials/time-series"
    q: dict[str, Any] = {"trialIds": a, "metricIds": "training.loss", "startBatches": 2}
    r = cluster.s.get(url, params={**q, "endBatches": 4})
    assert r.status_code == 200, r.text
    [trial] = r.json()["trials"]
    assert trial["trial"]["id"] == a
    [series] = trial["metrics"]
    assert [d["batches"] for d in series["data"]] == [2, 3, 4]
    assert all(d["time"].endswith("Z") for d in series["data"])
    # Nothing asked for: no series; an unknown trial: 404; bad arguments: 400.
    assert cluster.s.get(url, params={"trialIds": a}).json()["trials"][0]["metrics"] == []
    assert cluster.s.get(url, params={"trialIds": 999999}).status_code == 404
    bad = cluster.s.get(url, params={"trialIds": a, "metricIds": "loss"})
    assert bad.status_code == 400 and "group.name" in bad.text
    bad = cluster.s.get(url, params={**q, "timeSeriesFilter.name": "batches"})
    assert bad.status_code == 400 and "startBatches" in bad.text
    # Not read as /trials/{id}.
    assert cluster.s.get(f"{cluster.url}/api/v1/trials/{a}").status_code == 200


@pytest.mark.e2e
def test_limit_minus_one_means_all(cluster: Cluster, trained: list[int]) -> None:
    base = cluster.url + "/api/v1"
    for path, key in [
        ("/experiments", "experiments"),
        ("/projects/1/experiments", "experiments"),
        ("/users", "users"),
        (f"/trials/{trained[0]}/checkpoints", "checkpoints"),
        ("/models", "models"),
        ("/templates", "templates"),
        ("/workspaces", "workspaces"),
    ]:
        everything = cluster.s.get(base + path)
        assert everything.status_code == 200, (path, everything.text)
        minus = cluster.s.get(base + path, params={"limit": -1})
        assert minus.status_code == 200, (path, minus.text)
        assert minus.json()[key] == everything.json()[key], path
        assert cluster.s.get(base + path, params={"limit": -2}).status_code == 400, path
    one = cluster.s.get(base + "/experiments", params={"limit": 1}).json()["experiments"]
    assert len(one) == 1 and len(trained) == 2
    trial = cluster.get(f"/api/v1/trials/{trained[1]}")["trial"]
    logs = cluster.s.get(f"{base}/tasks/{trial['taskId']}/logs", params={"limit": -1})
    assert logs.status_code == 200 and len(logs.json()["logs"]) > 3
    tl = cluster.s.get(f"{base}/trials/{trained[1]}/logs", params={"limit": -1})
    assert tl.status_code == 200 and len(tl.text.splitlines()) > 3


@pytest.mark.e2e
@pytest.mark.skipif(not REF.exists(), reason="no .refvenv: run scripts/setup.sh --tests")
def test_unknown_task_logs_answer_404(
    cluster: Cluster, trained: list[int], tmp_path: pathlib.Path
) -> None:
    r = cluster.s.get(cluster.url + "/api/v1/tasks/no-such-task/logs")
    assert r.status_code == 404 and "no-such-task" in r.text, r.text
    ref = Ref(cluster.master, tmp_path / "home")
    ref.env["DET_USER"] = "admin"
    out = ref.det("e", "list", "--limit", "-1")
    assert out.count("lifecycle") == 2, out  # 0.37's det sends limit=-1 as is
