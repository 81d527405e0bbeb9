"""determined.pytorch.experimental against 0.37's: the same public names and parameters, and
the same exception classes for bad arguments (docs/pytorch/batch_processing.md)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from determined.pytorch import experimental

REF_PYTHON = pathlib.Path(__file__).resolve().parents[2] / ".refvenv" / "bin" / "python"
needs_ref = pytest.mark.skipif(
    not REF_PYTHON.exists(), reason="no .refvenv to compare with: run scripts/setup.sh --tests"
)

# Parameters (name, default) of each public callable, printed as JSON by the reference and here.
SURFACE = r"""
import inspect, json
from determined.pytorch import experimental as e

def params(f):
    out = []
    for p in inspect.signature(f).parameters.values():
        d = None if p.default is inspect.Parameter.empty else repr(p.default)
        out.append([p.name, d])
    return out

skip = {"run_cross_slot_reduction"}  # an internal of 0.37's reducer mixin, not ported
surface = {"torch_batch_process": params(e.torch_batch_process),
           "get_default_device": params(e.get_default_device)}
for cls in (e.TorchBatchProcessorContext, e.TorchBatchProcessor):
    for name, f in inspect.getmembers(cls, callable):
        if (not name.startswith("_") or name == "__init__") and name not in skip:
            surface[f"{cls.__name__}.{name}"] = params(f)
print(json.dumps(surface, sort_keys=True))
"""

BAD_CALLS = {
    "interval": "dict(checkpoint_interval=0)",
    "shuffle": "dict(dataloader_kwargs={'shuffle': True})",
    "sampler": "dict(dataloader_kwargs={'sampler': None})",
    "batch_sampler": "dict(dataloader_kwargs={'batch_sampler': None})",
    "batch_size_twice": "dict(batch_size=2, dataloader_kwargs={'batch_size': 2})",
    "unsized": "dict(dataset=iter(range(4)))",
    "off_cluster": "dict()",
}

# Each bad call's exception class and its bases, off-cluster.
CALLS = r"""
import json, sys, torch
from determined.pytorch import experimental as e

class P(e.TorchBatchProcessor):
    def __init__(self, context): pass
    def process_batch(self, batch, batch_idx): pass

out = {}
for name, kwargs in json.loads(sys.argv[1]).items():
    kw = eval(kwargs)
    dataset = kw.pop("dataset", list(range(4)))
    try:
        e.torch_batch_process(P, dataset, **kw)
        out[name] = None
    except Exception as err:
        out[name] = [c.__name__ for c in type(err).__mro__]
print(json.dumps(out))
"""


def _start(python: str, code: str, *args: str, cwd: pathlib.Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DET_", "PYTHON"))}
    env.update(HOME=str(cwd), DET_HOME=str(cwd / "det"))
    return subprocess.Popen(
        [python, "-I", "-c", code, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _answer(proc: subprocess.Popen[str]) -> Any:
    stdout, stderr = proc.communicate()
    assert proc.returncode == 0, stderr
    return json.loads(stdout.strip().splitlines()[-1])


def _start_ours(code: str, *args: str, cwd: pathlib.Path) -> subprocess.Popen[str]:
    repo = str(pathlib.Path(__file__).resolve().parents[2])
    code = f"import sys; sys.path.insert(0, {repo!r})\n{code}"
    return _start(sys.executable, code, *args, cwd=cwd)


# Both programs in one interpreter per side: importing torch and determined is most of the cost.
BOTH = SURFACE.replace("print(json.dumps(surface, sort_keys=True))", "") + CALLS.replace(
    "print(json.dumps(out))", 'print(json.dumps({"surface": surface, "bad": out}))'
)


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What the reference and ours print for BOTH: {"ref": ..., "ours": ...}."""
    # Both at once, each in its own home: each is mostly importing torch, one alone leaves a
    # core idle.
    args = (BOTH, json.dumps(BAD_CALLS))
    procs = {
        "ref": _start(str(REF_PYTHON), *args, cwd=tmp_path_factory.mktemp("ref")),
        "ours": _start_ours(*args, cwd=tmp_path_factory.mktemp("ours")),
    }
    try:
        return {name: _answer(proc) for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@needs_ref
def test_public_names_and_parameters_match_the_reference(answers: dict[str, Any]) -> None:
    assert answers["ours"]["surface"] == answers["ref"]["surface"]


@needs_ref
def test_bad_arguments_raise_the_reference_classes(answers: dict[str, Any]) -> None:
    ref, ours = answers["ref"]["bad"], answers["ours"]["bad"]
    for name in BAD_CALLS:
        assert ours[name] is not None and ref[name] is not None, name
        # ours is the reference's class or a subclass of it (Exception -> TypeError etc.)
        assert ref[name][0] in ours[name], (name, ours[name], ref[name])
    assert ours["unsized"][0] == "TypeError" and ours["off_cluster"][0] == "RuntimeError"


def test_bad_arguments_fail_before_anything_starts() -> None:
    class P(experimental.TorchBatchProcessor):
        def __init__(self, context: experimental.TorchBatchProcessorContext) -> None:
            pass

        def process_batch(self, batch: Any, batch_idx: int) -> None:
            pass

    data = list(range(4))
    with pytest.raises(ValueError, match="checkpoint_interval must be a positive integer"):
        experimental.torch_batch_process(P, data, checkpoint_interval=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'shuffle' must be false"):
        experimental.torch_batch_process(P, data, dataloader_kwargs={"shuffle": True})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must implement __len__"):
        experimental.torch_batch_process(P, iter(range(4)))
    with pytest.raises(RuntimeError, match="only runs in a trial on a cluster"):
        experimental.torch_batch_process(P, data)  # type: ignore[arg-type]
