"""benchmarks/search_sim.py on a smaller space (5 x 5 configurations), fast: adaptive_asha
replays identically from a seed and finds the best configuration with at most 35% of the
batches random search spends."""

from __future__ import annotations

import functools
import importlib.util
import pathlib
import sys
from types import ModuleType

import pytest

pytest.importorskip("optuna")  # the benchmark module also runs tpe


@functools.lru_cache(maxsize=1)
def _sim() -> ModuleType:
    path = pathlib.Path(__file__).resolve().parents[3] / "benchmarks" / "search_sim.py"
    spec = importlib.util.spec_from_file_location("search_sim", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["search_sim"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_adaptive_asha_replays_identically_from_the_seed() -> None:
    sim = _sim()
    a = sim.run_search(sim.asha_config(60), 5, 3, stop_at_best=False)
    b = sim.run_search(sim.asha_config(60), 5, 3, stop_at_best=False)
    assert a.trace == b.trace and a.trials == 60
    c = sim.run_search(sim.asha_config(60), 5, 4, stop_at_best=False)
    assert c.trace != a.trace  # another seed, another search


def test_adaptive_asha_finds_the_best_with_a_third_of_random_batches() -> None:
    sim = _sim()
    found = sim.batches_to_best(5, list(range(6)), max_trials=500)
    assert None not in found["random"] and None not in found["adaptive_asha"]
    ratio = sum(found["adaptive_asha"]) / sum(found["random"])
    assert ratio <= 0.35, found
