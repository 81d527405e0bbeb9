"""determined/master/api/_responses.py: the main routes' answers as typed models in the OpenAPI
document, the answers themselves unchanged.

The models document; the routes still hand FastAPI a ``dict[str, Any]`` (so its bytes are what
they were). What keeps the two together: a real master's answers validate against the models
strictly (every key there, no other key, exact types) and come back key for key from them.
"""

from __future__ import annotations

import time
import typing
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
from _kit.master import MasterProcess, Run
from fastapi.routing import APIRoute

from determined.master._app import create_app
from determined.master.api import ROUTERS, _responses
from determined.master.store import Store, sqlite_url

# Route -> the model its 200 answer is documented with.
DOCUMENTED: dict[str, type[pydantic.BaseModel]] = {
    "/info": _responses.MasterInfo,
    "/api/v1/master": _responses.GetMasterResponse,
    "/api/v1/me": _responses.GetMeResponse,
    "/api/v1/users": _responses.GetUsersResponse,
    "/api/v1/experiments": _responses.GetExperimentsResponse,
    "/api/v1/experiments/{experiment_id}": _responses.GetExperimentResponse,
    "/api/v1/experiments/{experiment_id}/trials": _responses.GetExperimentTrialsResponse,
    "/api/v1/trials/{trial_id}": _responses.GetTrialResponse,
    "/api/v1/checkpoints/{uuid}": _responses.GetCheckpointResponse,
    "/api/v1/trials/{trial_id}/checkpoints": _responses.GetCheckpointsResponse,
    "/api/v1/experiments/{experiment_id}/checkpoints": _responses.GetCheckpointsResponse,
    "/api/v1/agents": _responses.GetAgentsResponse,
    "/api/v1/agents/{agent_id}": _responses.GetAgentResponse,
    "/api/v1/tasks": _responses.GetTasksResponse,
}


def _check(model: type[pydantic.BaseModel], body: Any) -> None:
    """``body`` is exactly what ``model`` describes: it validates strictly (no key missing,
    none extra, no type coerced) and the model gives every key and value back."""
    parsed = model.model_validate(body, strict=True)
    assert parsed.model_dump(mode="json", by_alias=True, exclude_unset=True) == body


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data = tmp_path_factory.mktemp("doc")
    return create_app(Store(sqlite_url(data))).openapi()


@pytest.mark.parametrize("path", sorted(DOCUMENTED))
def test_the_document_names_each_routes_model(document: dict[str, Any], path: str) -> None:
    model = DOCUMENTED[path]
    answer = document["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]
    assert answer["schema"] == {"$ref": f"#/components/schemas/{model.__name__}"}
    component = document["components"]["schemas"][model.__name__]
    keys = {f.alias or name for name, f in model.model_fields.items()}
    assert set(component["properties"]) == keys
    assert component["additionalProperties"] is False


def test_the_routes_still_answer_a_plain_dict() -> None:
    """FastAPI validates and serializes the answer as ``dict[str, Any]``, as before the
    models: they cannot drop, add, reorder or coerce a key on the wire."""
    routes = {
        r.path: r
        for router in ROUTERS
        for r in router.routes
        if isinstance(r, APIRoute) and "GET" in (r.methods or ())
    }
    for path in DOCUMENTED:
        response_model = routes[path].response_model
        assert typing.get_origin(response_model) is typing.Annotated, path
        assert typing.get_args(response_model)[0] == dict[str, Any], path


def test_the_check_refuses_a_changed_answer() -> None:
    user = {
        "id": 1, "username": "admin", "admin": True, "active": True, "agentUserGroup": None,
        "displayName": "", "modifiedAt": "2024-01-01T00:00:00Z", "remote": False,
        "lastAuthAt": None,
    }  # fmt: skip
    _check(_responses.GetMeResponse, {"user": user})
    missing_null = {k: v for k, v in user.items() if k != "lastAuthAt"}
    for changed in (
        missing_null,
        {**user, "extra": 1},
        {**user, "id": "1"},  # an int64 written as a string where v1User has a number
        {**user, "last_auth_at": None, "lastAuthAt": None},  # snake_case key
    ):
        with pytest.raises(pydantic.ValidationError):
            _check(_responses.GetMeResponse, {"user": changed})


# ----------------------------------------------------------------------------- real masters


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The documented routes' answers: from a master whose trial runs through the dev
    endpoints (experiments, trials, checkpoints, a live allocation), and from one whose
    resource manager runs a command on one of two agents (agents with a container, a task)."""
    got: dict[str, Any] = {}
    data = tmp_path_factory.mktemp("answers")
    with MasterProcess(data / "dev") as m:
        run = Run(m)
        e, t, uuid = run.experiment_id, run.trial_id, "11111111-2222-3333-4444-555555555555"
        storage = {"type": "shared_fs", "host_path": str(data / "ckpt")}
        assert run.post("/api/v1/runs/start", json={"runId": t, "checkpointStorage": storage}).ok
        ckpt = {
            "uuid": uuid,
            "taskId": run.task_id,
            "allocationId": run.allocation_id,
            "reportTime": "2024-05-06T07:08:09Z",
            "resources": {"model.pt": "100"},
            "metadata": {"steps_completed": 10},
        }
        assert run.post("/api/v1/checkpoints", json=ckpt).ok
        assert run.metrics("training", 10, {"loss": 0.5}).ok
        assert run.metrics("validation", 10, {"loss": 0.4}).ok
        for path in DOCUMENTED:
            if not path.startswith("/api/v1/agents"):  # no agents here: no resource manager
                got[path] = run.get(path.format(experiment_id=e, trial_id=t, uuid=uuid))
        got["dev tasks"] = got["/api/v1/tasks"]
    with MasterProcess(data / "rm", cpu_slots=2, slots_per_agent=1) as m:
        s = m.session()
        config = {"entrypoint": ["sleep", "60"], "resources": {"slots": 1}}
        r = s.post(m.url + "/api/v1/commands", json={"config": config})
        assert r.status_code == 200, r.text
        task_id = r.json()["command"]["id"]
        deadline = time.monotonic() + 30
        while s.get(f"{m.url}/api/v1/commands/{task_id}").json()["command"]["state"] != (
            "STATE_RUNNING"
        ):
            assert time.monotonic() < deadline, "the command did not start"
            time.sleep(0.2)
        got["/api/v1/agents"] = s.get(m.url + "/api/v1/agents").json()
        agent_id = got["/api/v1/agents"]["agents"][0]["id"]
        got["/api/v1/agents/{agent_id}"] = s.get(f"{m.url}/api/v1/agents/{agent_id}").json()
        got["/api/v1/tasks"] = s.get(m.url + "/api/v1/tasks").json()
        assert s.post(f"{m.url}/api/v1/commands/{task_id}/kill", json={}).ok
    yield got


@pytest.mark.e2e
@pytest.mark.parametrize("path", sorted(DOCUMENTED))
def test_a_real_masters_answer_is_its_model(answers: dict[str, Any], path: str) -> None:
    _check(DOCUMENTED[path], answers[path])


@pytest.mark.e2e
def test_the_answers_reach_the_optional_parts(answers: dict[str, Any]) -> None:
    """The live answers above fill what is empty or null when nothing runs: a slot's
    container, a trial's validations, a task's devices on its agent, a trial's allocation.
    (A task's proxy ports are a notebook's, shell's or TensorBoard's: not reached here.)"""
    containers = [
        slot["container"]
        for agent in answers["/api/v1/agents"]["agents"]
        for slot in agent["slots"].values()
    ]
    assert [c for c in containers if c is not None]
    assert answers["/api/v1/trials/{trial_id}"]["trial"]["bestValidation"] is not None
    [task] = answers["/api/v1/tasks"]["allocationIdToSummary"].values()
    assert task["resources"][0]["agentDevices"]
    _check(_responses.GetTasksResponse, answers["dev tasks"])
    assert answers["dev tasks"]["allocationIdToSummary"]
