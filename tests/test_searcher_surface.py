"""``determined.searcher`` against Determined 0.37's, name by name and parameter by parameter,
with the reference described live by its own interpreter (``.refvenv``), the operations'
``v1SearcherOperation`` JSON compared with the reference's bindings, and the runner's
``SearcherState`` file layout compared with the reference's
(docs/reference/custom_searchers.md)."""

from __future__ import annotations

import inspect
import json
import pathlib
import subprocess
import sys
import uuid
from typing import Any

import pytest

from determined import searcher

REPO = pathlib.Path(__file__).resolve().parents[1]
REF_PYTHON = REPO / ".refvenv" / "bin" / "python"
FIXTURE = REPO / "tests" / "fixtures" / "reference_surface"
sys.path.insert(0, str(FIXTURE))
sys.path.insert(0, str(REPO / "tests"))
from generate import parameters  # noqa: E402
from test_public_surface import _problems  # noqa: E402

pytestmark = pytest.mark.skipif(not REF_PYTHON.exists(), reason="no .refvenv")

# Describes a searcher module: {name: params} and {Class.member: params} for public members.
DESCRIBE = r"""
import inspect, json, sys
sys.path.insert(0, sys.argv[1])
from generate import parameters

def describe(mod):
    out = {}
    for name in sorted(n for n in dir(mod) if not n.startswith("_")):
        obj = getattr(mod, name)
        if inspect.ismodule(obj) or not inspect.isclass(obj):
            continue
        out[name] = parameters(obj)
        for attr in sorted(vars(obj)):
            if attr.startswith("_") and attr != "__init__":
                continue
            member = inspect.getattr_static(obj, attr)
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if callable(member):
                out[f"{name}.{attr}"] = parameters(member)
    return out
"""


def _reference(script: str) -> Any:
    proc = subprocess.run(
        [str(REF_PYTHON), "-I", "-W", "ignore", "-c", script, str(FIXTURE)],
        cwd=FIXTURE,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ours() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in searcher.__all__:
        obj = getattr(searcher, name)
        out[name] = parameters(obj)
        for attr in sorted(dir(obj)):
            if attr.startswith("_") and attr != "__init__":
                continue
            member = inspect.getattr_static(obj, attr)
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if callable(member):
                out[f"{name}.{attr}"] = parameters(member)
    return out


def test_every_public_name_and_parameter_of_the_reference_exists_here() -> None:
    script = DESCRIBE + "import determined.searcher as s\nprint(json.dumps(describe(s)))"
    reference = _reference(script)
    ours = _ours()
    assert len(reference) > 30
    problems = []
    for name, ref in sorted(reference.items()):
        if name not in ours:
            problems.append(f"{name}: missing")
        else:
            problems += [f"{name}: {p}" for p in _problems(ref, ours[name])]
    assert not problems, "differences from Determined 0.37:\n" + "\n".join(problems)


def test_operations_have_the_reference_wire_shape() -> None:
    rid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    script = f"""
import json, uuid
from determined import searcher
rid = uuid.UUID("{rid}")
ops = [
    searcher.Create(rid, {{"lr": 0.1, "nested": {{"a": [1, 2]}}}}, None),
    searcher.ValidateAfter(rid, 7),
    searcher.Close(rid),
    searcher.Progress(0.5),
    searcher.Shutdown(),
    searcher.Shutdown(cancel=True),
    searcher.Shutdown(failure=True),
]
state = searcher.SearcherState()
state.trials_created = {{rid}}
state.trial_progress = {{rid: 2.5}}
state.failures = {{rid}}
state.experiment_id = 4
print(json.dumps([[op._to_searcher_operation().to_json(True) for op in ops], state.to_dict()]))
"""
    ref_ops, ref_state = _reference(script)
    ops: list[searcher.Operation] = [
        searcher.Create(rid, {"lr": 0.1, "nested": {"a": [1, 2]}}, None),
        searcher.ValidateAfter(rid, 7),
        searcher.Close(rid),
        searcher.Progress(0.5),
        searcher.Shutdown(),
        searcher.Shutdown(cancel=True),
        searcher.Shutdown(failure=True),
    ]
    assert [op._to_searcher_operation() for op in ops] == ref_ops
    state = searcher.SearcherState()
    state.trials_created = {rid}
    state.trial_progress = {rid: 2.5}
    state.failures = {rid}
    state.experiment_id = 4
    assert state.to_dict() == ref_state
    again = searcher.SearcherState()
    again.from_dict(ref_state)  # a state file written by either reads back the same
    assert again.to_dict() == ref_state
