"""Custom search methods for the custom-searcher tests, and the runner script that drives one
with ``LocalSearchRunner`` in its own process (so that a test can SIGKILL it).

``python -m _kit.custom_search METHOD SEARCHER_DIR MODEL_DIR OUT`` runs METHOD (``random`` or
``asha``) against ``$DET_MASTER`` and prints ``experiment <id> done`` at the end.
"""

from __future__ import annotations

import json
import pathlib
import random
import sys
import uuid
from typing import Any

from determined import searcher

# A Core API trial: trains op.length steps (sleeping ``sleep`` seconds each), checkpoints
# after each operation and resumes from its latest checkpoint. Its metric (lower is better)
# is hp "x" plus 1/steps. Each operation it completes is logged to OUT/ops.jsonl.
TRAIN_PY = r"""
import json, pathlib, time
import determined as det
from determined import core

info = det.get_cluster_info()
hp = info.trial.hparams
out = pathlib.Path(hp["out"])
with core.init() as ctx:
    steps = 0
    if info.latest_checkpoint:
        with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
            steps = json.loads((path / "state.json").read_text())["steps"]
    for op in ctx.searcher.operations():
        while steps < op.length:
            time.sleep(hp.get("sleep", 0.0))
            steps += 1
            op.report_progress(steps)
        loss = hp["x"] + 1.0 / steps
        ctx.train.report_validation_metrics(steps, {"loss": loss})
        with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, _):
            (path / "state.json").write_text(json.dumps({"steps": steps}))
        with open(out / "ops.jsonl", "a") as f:
            f.write(json.dumps({"trial": info.trial.trial_id, "length": steps}) + "\n")
        op.report_completed(loss)
"""


class RandomSearch(searcher.SearchMethod):
    """``max_trials`` trials with a random ``x``, each trained to ``length``, at most
    ``concurrent`` at a time; shuts the experiment down when all are closed."""

    def __init__(self, max_trials: int, length: int, concurrent: int, seed: int, out: str):
        self.max_trials = max_trials
        self.length = length
        self.concurrent = concurrent
        self.rng = random.Random(seed)
        self.out = out
        self.created = 0

    def _create(self) -> searcher.Create:
        self.created += 1
        x = round(self.rng.uniform(0.0, 1.0), 4)
        return searcher.Create(uuid.uuid4(), {"x": x, "out": self.out, "sleep": 0.05}, None)

    def initial_operations(
        self, searcher_state: searcher.SearcherState
    ) -> list[searcher.Operation]:
        n = min(self.concurrent, self.max_trials)
        return [self._create() for _ in range(n)]

    def on_trial_created(
        self, searcher_state: searcher.SearcherState, request_id: uuid.UUID
    ) -> list[searcher.Operation]:
        return [searcher.ValidateAfter(request_id, self.length)]

    def on_validation_completed(
        self,
        searcher_state: searcher.SearcherState,
        request_id: uuid.UUID,
        metric: Any,
        train_length: int,
    ) -> list[searcher.Operation]:
        return [searcher.Close(request_id)]

    def on_trial_closed(
        self, searcher_state: searcher.SearcherState, request_id: uuid.UUID
    ) -> list[searcher.Operation]:
        if self.created < self.max_trials:
            return [self._create()]
        if len(searcher_state.trials_closed) >= self.max_trials:
            return [searcher.Shutdown()]
        return []

    def on_trial_exited_early(
        self,
        searcher_state: searcher.SearcherState,
        request_id: uuid.UUID,
        exited_reason: searcher.ExitedReason,
    ) -> list[searcher.Operation]:
        return []

    def progress(self, searcher_state: searcher.SearcherState) -> float:
        return len(searcher_state.trials_closed) / self.max_trials

    def save_method_state(self, path: pathlib.Path) -> None:
        state = {"created": self.created, "rng": self.rng.getstate()}
        (path / "method.json").write_text(json.dumps(state))

    def load_method_state(self, path: pathlib.Path) -> None:
        state = json.loads((path / "method.json").read_text())
        self.created = state["created"]
        _set_rng(self.rng, state["rng"])


class ASHALike(searcher.SearchMethod):
    """Synchronous successive halving: ``n`` trials train to ``rungs[0]``; the better half
    (smaller metric) of each rung is promoted to the next rung's length, the rest closed."""

    def __init__(self, n: int, rungs: list[int], seed: int, out: str):
        self.n = n
        self.rungs = rungs
        self.rng = random.Random(seed)
        self.out = out
        self.rung_of: dict[str, int] = {}
        self.results: dict[int, dict[str, float]] = {}

    def initial_operations(
        self, searcher_state: searcher.SearcherState
    ) -> list[searcher.Operation]:
        ops: list[searcher.Operation] = []
        for _ in range(self.n):
            x = round(self.rng.uniform(0.0, 1.0), 4)
            ops.append(searcher.Create(uuid.uuid4(), {"x": x, "out": self.out}, None))
        return ops

    def on_trial_created(
        self, searcher_state: searcher.SearcherState, request_id: uuid.UUID
    ) -> list[searcher.Operation]:
        self.rung_of[str(request_id)] = 0
        return [searcher.ValidateAfter(request_id, self.rungs[0])]

    def on_validation_completed(
        self,
        searcher_state: searcher.SearcherState,
        request_id: uuid.UUID,
        metric: Any,
        train_length: int,
    ) -> list[searcher.Operation]:
        rung = self.rung_of[str(request_id)]
        self.results.setdefault(rung, {})[str(request_id)] = float(metric)
        entered = self.n // (2**rung)
        if len(self.results[rung]) < entered:
            return []  # the rung is not complete yet
        if rung + 1 == len(self.rungs):
            return [searcher.Close(uuid.UUID(r)) for r in self.results[rung]]
        ranked = sorted(self.results[rung], key=lambda r: self.results[rung][r])
        keep = ranked[: max(1, entered // 2)]
        ops: list[searcher.Operation] = []
        for rid in ranked:
            if rid in keep:
                self.rung_of[rid] = rung + 1
                ops.append(searcher.ValidateAfter(uuid.UUID(rid), self.rungs[rung + 1]))
            else:
                ops.append(searcher.Close(uuid.UUID(rid)))
        return ops

    def on_trial_closed(
        self, searcher_state: searcher.SearcherState, request_id: uuid.UUID
    ) -> list[searcher.Operation]:
        if len(searcher_state.trials_closed) >= self.n:
            return [searcher.Shutdown()]
        return []

    def on_trial_exited_early(
        self,
        searcher_state: searcher.SearcherState,
        request_id: uuid.UUID,
        exited_reason: searcher.ExitedReason,
    ) -> list[searcher.Operation]:
        return [searcher.Shutdown(failure=True)]

    def progress(self, searcher_state: searcher.SearcherState) -> float:
        return len(searcher_state.trials_closed) / self.n

    def save_method_state(self, path: pathlib.Path) -> None:
        state = {"rung_of": self.rung_of, "results": self.results, "rng": self.rng.getstate()}
        (path / "method.json").write_text(json.dumps(state))

    def load_method_state(self, path: pathlib.Path) -> None:
        state = json.loads((path / "method.json").read_text())
        self.rung_of = state["rung_of"]
        self.results = {int(k): v for k, v in state["results"].items()}
        _set_rng(self.rng, state["rng"])


def _set_rng(rng: random.Random, state: list[Any]) -> None:
    """Restore ``rng.getstate()`` after a JSON round trip (tuples became lists)."""
    version, internal, gauss = state
    rng.setstate((version, tuple(internal), gauss))


class Steps(searcher.SearchMethod):
    """``len(hparams)`` trials, one per hyperparameter dict; each validates at every length
    of ``lengths`` in turn and is then closed."""

    def __init__(self, hparams: list[dict[str, Any]], lengths: list[int]):
        self.hparams = hparams
        self.lengths = lengths

    def initial_operations(
        self, searcher_state: searcher.SearcherState
    ) -> list[searcher.Operation]:
        return [searcher.Create(uuid.uuid4(), hp, None) for hp in self.hparams]

    def on_trial_created(
        self, searcher_state: searcher.SearcherState, request_id: uuid.UUID
    ) -> list[searcher.Operation]:
        return [searcher.ValidateAfter(request_id, self.lengths[0])]

    def on_validation_completed(
        self,
        searcher_state: searcher.SearcherState,
        request_id: uuid.UUID,
        metric: Any,
        train_length: int,
    ) -> list[searcher.Operation]:
        later = [n for n in self.lengths if n > train_length]
        if later:
            return [searcher.ValidateAfter(request_id, later[0])]
        return [searcher.Close(request_id)]

    def on_trial_closed(
        self, searcher_state: searcher.SearcherState, request_id: uuid.UUID
    ) -> list[searcher.Operation]:
        if len(searcher_state.trials_closed) >= len(self.hparams):
            return [searcher.Shutdown()]
        return []

    def on_trial_exited_early(
        self,
        searcher_state: searcher.SearcherState,
        request_id: uuid.UUID,
        exited_reason: searcher.ExitedReason,
    ) -> list[searcher.Operation]:
        return [searcher.Shutdown(failure=True)]

    def progress(self, searcher_state: searcher.SearcherState) -> float:
        return len(searcher_state.trials_closed) / len(self.hparams)


def config(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "entrypoint": "python3 train.py",
        "max_restarts": 0,
        "searcher": {"name": "custom", "metric": "loss", "smaller_is_better": True},
    }


def main(argv: list[str]) -> None:
    method_name, searcher_dir, model_dir, out = argv
    method: searcher.SearchMethod
    if method_name == "random":
        method = RandomSearch(max_trials=4, length=3, concurrent=2, seed=1, out=out)
    else:
        method = ASHALike(n=4, rungs=[1, 3], seed=2, out=out)
    runner = searcher.LocalSearchRunner(method, searcher_dir=pathlib.Path(searcher_dir))
    exp_id = runner.run(config(f"custom-{method_name}"), model_dir=model_dir)
    print(f"experiment {exp_id} done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
