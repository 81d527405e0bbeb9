"""The master's HTTP API fuzzed with schemathesis against the OpenAPI document it serves
(``/openapi.json``), on a real master process: no answer is a 5xx, every 200 is as the
document describes it, and the master stays up.

Left out: ``auth/logout`` (it would revoke the token the fuzzer uses) and the calls that block
by design (the preemption and searcher-event long polls, rendezvous, all_gather, followed log
and metric streams); their inputs are covered by tests of their own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
import yaml
from _kit.master import MasterProcess, Run, login
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from determined.common import expconf

pytestmark = pytest.mark.e2e

# Per operation, valid and invalid inputs drawn together. At 25 the whole API took 75 s on 2
# cores (SQLite, drawing and sending) and 27 s more to replay (PostgreSQL): the largest file of
# the suite, which is near its 20-minute budget. Drawing the cases costs more than sending
# them, so the first store's run keeps its cases and the second replays them (the routes'
# code is the same on both stores; what differs is how each store answers).
EXAMPLES = 15
_CASES: dict[str, list[Any]] = {}  # operation label -> the cases drawn for it, in order
BLOCKING = (
    r"(auth/logout|signals/preemption|/rendezvous|/all_gather|/logs$|trials/metrics/"
    r"|/searcher_events)"
)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def fuzz_master(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MasterProcess]:
    """The master under fuzzing, once on each store backend (tests/conftest.py)."""
    db_url = None
    if request.param == "postgres":
        db_url = request.getfixturevalue("postgres_server").new_database()
    m = MasterProcess(tmp_path_factory.mktemp("fuzz") / "master", db_url=db_url)
    m.start()
    Run(m)  # an experiment with an allocated trial, so ids 1 reach real rows
    yield m
    m.stop()
    log = m.log.read_text()
    assert "Traceback" not in log, log[-3000:]


@pytest.fixture(scope="module")
def admin_headers(fuzz_master: MasterProcess) -> dict[str, str]:
    return {"Authorization": f"Bearer {login(fuzz_master.url, 'admin')}"}


def _problem(case: Any, response: Any) -> str | None:
    """What is wrong with one answer, or None."""
    # 501 is a deliberate "not supported yet" (with a message, checked below), not a crash.
    if response.status_code >= 500 and response.status_code != 501:
        return f"{response.status_code}: {response.text[:300]}"
    if response.status_code == 200 and not case.operation.is_valid_response(response):
        # The document describes the answer (api/_responses for the main routes): it must
        # hold for every input the fuzzer draws, not only the tests' own.
        return f"200 unlike the OpenAPI document: {response.text[:300]}"
    if response.status_code >= 400 and "json" in response.headers.get("content-type", ""):
        body = response.json()
        # Every error names what was wrong: our {code, message} or FastAPI's {detail}.
        if not (isinstance(body, dict) and (body.get("message") or body.get("detail"))):
            return f"{response.status_code} without a message: {response.text[:300]}"
    return None


def test_no_server_errors(fuzz_master: MasterProcess, admin_headers: dict[str, str]) -> None:
    # schemathesis's pytest plugin does not run under pytest 9 (lazy fixtures), so drive its
    # case strategies with hypothesis directly: valid and invalid inputs per operation.
    schema = schemathesis.openapi.from_url(fuzz_master.url + "/openapi.json")
    operations = [r.ok() for r in schema.exclude(path_regex=BLOCKING).get_all_operations()]
    assert len(operations) > 40, [op.label for op in operations]
    problems: dict[str, str] = {}

    def check_one(case: Any) -> None:
        response = case.call(base_url=fuzz_master.url, headers=admin_headers, timeout=15)
        problem = _problem(case, response)
        if problem is not None:
            problems.setdefault(case.operation.label, f"{problem}\n  {case.as_curl_command()}")

    for op in operations:
        if op.label in _CASES:  # drawn in the other store's run: send the same cases
            for case in _CASES[op.label]:
                check_one(case)
            continue
        drawn = _CASES.setdefault(op.label, [])
        strategy = op.as_strategy(GenerationMode.POSITIVE) | op.as_strategy(GenerationMode.NEGATIVE)

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(strategy)
        def check(case: Any) -> None:
            drawn.append(case)  # noqa: B023 - check() runs within this iteration
            check_one(case)

        check()
        assert drawn, op.label
    assert not problems, "\n".join(f"{k}: {v}" for k, v in problems.items())
    assert fuzz_master.proc is not None and fuzz_master.proc.poll() is None


def test_out_of_range_ids_are_400_not_500(
    fuzz_master: MasterProcess, admin_headers: dict[str, str]
) -> None:
    """Found by the fuzzer: ids past 64 bits overflowed SQLite's INTEGER and answered 500."""
    big = 2**70
    for method, path in [
        ("GET", f"/api/v1/experiments/{big}"),
        ("POST", f"/api/v1/experiments/{big}/activate"),
        ("GET", f"/api/v1/webui/experiments/{big}/metrics"),
        ("GET", f"/api/v1/trials/{big}"),
    ]:
        r = requests.request(method, fuzz_master.url + path, headers=admin_headers, timeout=10)
        assert r.status_code in (400, 404), (path, r.status_code, r.text)
    r = requests.post(
        fuzz_master.url + "/api/v1/runs/start",
        json={"runId": -(2**72), "checkpointStorage": {"type": "shared_fs"}},
        headers=admin_headers,
        timeout=10,
    )
    assert r.status_code == 400, r.text
    assert "out of range" in r.json()["message"] or "runId" in r.json()["message"]


# ----------------------------------------------------------------------------- configs

BASE = {
    "name": "fuzz",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": 10},
    "hyperparameters": {"lr": 0.1},
}
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
TOP_KEYS = sorted(expconf.KNOWN_KEYS) + ["bogus"]
NESTED = {
    "searcher": ["name", "metric", "max_length", "max_trials", "smaller_is_better", "bogus"],
    "resources": ["slots_per_trial", "max_slots", "shm_size", "bogus"],
    "checkpoint_storage": ["type", "host_path", "storage_path", "bucket", "bogus"],
    "hyperparameters": ["lr", "layers"],
}


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    raw = json.loads(json.dumps(BASE))
    for _ in range(draw(st.integers(1, 3))):
        section = draw(st.sampled_from([None, *NESTED]))
        if section is None:
            raw[draw(st.sampled_from(TOP_KEYS))] = draw(values)
        else:
            if not isinstance(raw.get(section), dict):
                raw[section] = {}
            raw[section][draw(st.sampled_from(NESTED[section]))] = draw(values)
    return raw


def _check_create(url: str, headers: dict[str, str], text: str) -> None:
    r = requests.post(
        url + "/api/v1/experiments",
        json={"config": text, "validateOnly": True},
        headers=headers,
        timeout=30,
    )
    assert r.status_code in (200, 400), (r.status_code, r.text, text)
    if r.status_code == 400:
        message = r.json()["message"]
        if message.startswith("invalid experiment config:"):
            # One line per problem: the key path, then what is allowed.
            for line in message.split("\n")[1:]:
                path, _, what = line.strip().partition(": ")
                assert path and what, (line, text)
                assert path.isprintable(), (line, text)  # odd keys are quoted, not raw
        else:
            assert "YAML" in message or "mapping" in message, (message, text)


@settings(max_examples=120, deadline=None, database=None, derandomize=True)
@given(configs())
def test_random_configs_through_create_are_200_or_a_precise_400(
    fuzz_master: MasterProcess, admin_headers: dict[str, str], raw: dict[str, Any]
) -> None:
    text = yaml.safe_dump(raw, allow_unicode=True)
    _check_create(fuzz_master.url, admin_headers, text)


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(st.text(max_size=80))
def test_random_yaml_text_through_create_is_a_precise_400(
    fuzz_master: MasterProcess, admin_headers: dict[str, str], text: str
) -> None:
    _check_create(fuzz_master.url, admin_headers, text)


def test_validate_only_creates_nothing(
    fuzz_master: MasterProcess, admin_headers: dict[str, str]
) -> None:
    r = requests.get(fuzz_master.url + "/api/v1/experiments", headers=admin_headers, timeout=10)
    assert r.ok
    assert len(r.json()["experiments"]) == 1  # the fixture's; fuzzed creates only validated
