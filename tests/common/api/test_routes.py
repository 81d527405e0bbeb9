"""``determined.common.api._routes`` is the one place the client spells a master route.

A guard reads the source with ``ast``: no string that starts with ``/api/v1`` and no raw
``<response>.json()[...]`` subscript outside ``_routes``, in the CLI, the SDK, the Core API,
the launchers or anywhere else (the master, which serves the routes, is not a client and is
left out). Prose that mentions a route (a docstring, a help text) does not start with it.

The rest run the functions against a recording HTTP server on 127.0.0.1 and check what went
on the wire.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterator

import pytest
from _kit.recording_master import RecordingMaster

from determined import errors
from determined.common.api import Session, _routes

ROOT = pathlib.Path(__file__).resolve().parents[3] / "determined"
ROUTES = "determined/common/api/_routes.py"


def _count(source: str) -> tuple[int, int]:
    """(strings starting with /api/v1, ``x.json()[...]`` subscripts) in ``source``."""
    tree = ast.parse(source)
    # An f-string's first piece is its own Constant node: count the f-string once.
    pieces = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    paths = subscripts = 0
    for node in ast.walk(tree):
        text = None
        if isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            text = first.value if isinstance(first, ast.Constant) else None
        elif isinstance(node, ast.Constant) and id(node) not in pieces:
            text = node.value
        if isinstance(text, str) and text.startswith("/api/v1"):
            paths += 1
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr == "json"
        ):
            subscripts += 1
    return paths, subscripts


def _counts() -> dict[str, tuple[int, int]]:
    """module -> its counts, for the modules that have any."""
    found = {}
    for file in sorted(ROOT.rglob("*.py")):
        rel = file.relative_to(ROOT.parent).as_posix()
        if rel.startswith("determined/master/") or rel == ROUTES:
            continue
        counts = _count(file.read_text())
        if counts != (0, 0):
            found[rel] = counts
    return found


def test_no_route_spelled_outside_the_client_module() -> None:
    found = _counts()
    assert not found, (
        "(path strings, .json()[...] subscripts) outside determined/common/api/_routes.py: "
        f"{found}; add a function to _routes for the call and use it"
    )


def test_the_guard_counts_paths_not_prose() -> None:
    source = (
        'a = f"/api/v1/trials/{x}"\n'
        'b = "/api/v1/me"\n'
        'c = "see GET /api/v1/me"\n'
        'd = sess.get(b).json()["user"]\n'
        "e = sess.get(b).json().get('user')\n"
    )
    assert _count(source) == (2, 1)


@pytest.fixture
def master() -> Iterator[RecordingMaster]:
    with RecordingMaster() as m:
        yield m


def test_a_listing_sends_only_the_filters_given(master: RecordingMaster) -> None:
    master.route("GET", r"/api/v1/experiments", (200, {"experiments": [], "pagination": {}}))
    sess = Session(master.url, max_attempts=1)
    _routes.list_experiments(sess, archived=False, users=["ann"], offset=0, limit=5)
    _routes.list_experiments(sess, experiment_ids=[1, 2], project_id=3)
    first, second = master.find("GET", r"/api/v1/experiments")
    assert first.query == {"archived": ["false"], "users": ["ann"], "offset": ["0"], "limit": ["5"]}
    assert second.query == {"experimentIdFilter.incl": ["1", "2"], "projectId": ["3"]}


def test_a_model_name_is_one_path_segment(master: RecordingMaster) -> None:
    """A name with a slash or a question mark still names the model, not another route."""
    master.route("GET", r"/api/v1/models/[^/]+", (200, {"model": {"name": "a/b?c", "id": 4}}))
    model = _routes.get_model(Session(master.url, max_attempts=1), "a/b?c")
    assert model["id"] == 4
    (req,) = master.requests
    assert req.path == "/api/v1/models/a%2Fb%3Fc"
    assert req.query == {}


def test_an_answer_without_its_object_is_a_named_error(master: RecordingMaster) -> None:
    master.route("GET", r"/api/v1/trials/7", (200, {"something": "else"}))
    with pytest.raises(errors.MasterError, match=r"GET /api/v1/trials/7: .* no 'trial'"):
        _routes.get_trial(Session(master.url, max_attempts=1), 7)


def test_bodies_and_methods_as_before(master: RecordingMaster) -> None:
    """A few calls whose bodies the CLI and SDK built by hand before: the same JSON."""
    master.route("POST", r"/api/v1/checkpoints/rm", (200, {}))
    master.route("DELETE", r"/api/v1/resource-pools/gpu/workspace-bindings", (200, {}))
    master.route("POST", r"/api/v1/agents/a1/disable", (200, {}))
    master.route("POST", r"/api/v1/agents/a1/enable", (200, {}))
    sess = Session(master.url, max_attempts=1)
    _routes.remove_checkpoint_files(sess, ["u1"], ["*.pt"])
    _routes.bind_pool_workspaces(sess, "gpu", "delete", ["team"])
    _routes.toggle_agent(sess, "a1", "disable", drain=True)
    _routes.toggle_agent(sess, "a1", "enable")
    rm, unbind, disable, enable = master.requests
    assert (rm.method, rm.body) == (
        "POST",
        {"checkpointUuids": ["u1"], "checkpointGlobs": ["*.pt"]},
    )
    assert (unbind.method, unbind.body) == (
        "DELETE",
        {"resourcePoolName": "gpu", "workspaceNames": ["team"]},
    )
    assert disable.body == {"drain": True}
    assert enable.body is None
