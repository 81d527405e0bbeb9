"""Search methods on synthetic learning curves: how many batches to find the best configuration.

The space is ``side x side`` configurations (two int hyperparameters; 8 x 8 = 64 by default).
Each configuration has a learning curve ``loss(t) = final + (1 + 2 final) (1 + t)^-rate`` with
``final`` a bowl with one minimum plus a fixed bump per configuration, and ``rate`` in
[0.6, 0.9]: worse configurations start higher, early rankings are informative, and curves of
similar configurations cross (the best one ranks 2nd or 3rd at 1, 4 and 16 batches).
Validations add seeded noise (sd 0.002).

The search methods run as the master runs them, but driven directly here (no master process):
operations are carried out one at a time, oldest first; a promoted trial resumes where it
stopped, so it costs only the extra batches. For each seed the script measures:

- batches to best: batches trained by all trials until a trial of the best configuration has
  trained to ``max_length``, for random search and adaptive_asha (both with a large
  ``max_trials`` so they keep going until they get there);
- replay: adaptive_asha run twice from the same seed gives the same operations and metrics;
- same budget: best final loss of tpe vs random, each with ``--budget`` full-length trials.

    .venv/bin/python benchmarks/search_sim.py               # 64 configurations, 20 seeds
    .venv/bin/python benchmarks/search_sim.py --side 4 --seeds 5
"""

from __future__ import annotations

import argparse
import collections
import math
import random
import statistics
from dataclasses import dataclass, field
from typing import Any

import optuna

from determined.master.searcher import (
    Close,
    Create,
    Shutdown,
    ValidateAfter,
    make_search_method,
    operation_to_dict,
)

MAX_LENGTH = 256


def space(side: int) -> dict[str, Any]:
    return {
        "a": {"type": "int", "minval": 0, "maxval": side - 1},
        "b": {"type": "int", "minval": 0, "maxval": side - 1},
    }


def _bump(a: int, b: int, salt: int) -> float:
    """A fixed pseudo-random number in [0, 1) per configuration (no global RNG)."""
    return random.Random(a * 1_000_003 + b * 7_919 + salt).random()


def final_loss(a: int, b: int, side: int) -> float:
    ca, cb = 0.7 * (side - 1), 0.3 * (side - 1)
    bowl = ((a - ca) ** 2 + (b - cb) ** 2) / side**2
    return 0.1 + bowl + 0.08 * _bump(a, b, 1)


def curve(hp: dict[str, Any], t: int, side: int) -> float:
    final = final_loss(hp["a"], hp["b"], side)
    rate = 0.6 + 0.3 * _bump(hp["a"], hp["b"], 2)
    return final + (1.0 + 2.0 * final) * (1.0 + t) ** -rate


def best_config(side: int) -> tuple[int, int]:
    return min(
        ((a, b) for a in range(side) for b in range(side)), key=lambda c: final_loss(*c, side)
    )


@dataclass
class Result:
    batches: int = 0  # trained by all trials so far
    batches_to_best: int | None = None  # when the best configuration first reached max_length
    best_final: float = math.inf  # best loss among trials trained to max_length
    trials: int = 0
    trace: list[dict[str, Any]] = field(default_factory=list)


def run_search(
    searcher: dict[str, Any], side: int, seed: int, *, stop_at_best: bool, max_events: int = 10**6
) -> Result:
    """Drive one search to its Shutdown (or until the best configuration is fully trained)."""
    method = make_search_method(searcher, space(side), seed)
    noise = random.Random(seed ^ 0x5EED)
    best = best_config(side)
    res = Result()
    hps: dict[str, dict[str, Any]] = {}
    trained: dict[str, int] = collections.defaultdict(int)
    queue: collections.deque[Any] = collections.deque()

    def accept(ops: list[Any]) -> bool:
        for op in ops:
            res.trace.append(operation_to_dict(op))
            if isinstance(op, Shutdown):
                return True
            if isinstance(op, Create):
                hps[op.request_id] = op.hparams
                res.trials += 1
            queue.append(op)
        return False

    done = accept(method.initial_operations())
    for _ in range(max_events):
        if done or not queue:
            return res
        op = queue.popleft()
        if isinstance(op, Create):
            done = accept(method.on_trial_created(op.request_id))
        elif isinstance(op, Close):
            done = accept(method.on_trial_closed(op.request_id))
        elif isinstance(op, ValidateAfter):
            rid, hp = op.request_id, hps[op.request_id]
            res.batches += op.length - trained[rid]
            trained[rid] = op.length
            value = curve(hp, op.length, side) + noise.gauss(0.0, 0.002)
            res.trace.append({"metric": value})
            if op.length == MAX_LENGTH:
                res.best_final = min(res.best_final, final_loss(hp["a"], hp["b"], side))
                if (hp["a"], hp["b"]) == best and res.batches_to_best is None:
                    res.batches_to_best = res.batches
                    if stop_at_best:
                        return res
            done = accept(method.on_validation_completed(rid, value, op.length))
    raise RuntimeError(f"search did not finish in {max_events} events")


def random_config(max_trials: int) -> dict[str, Any]:
    return {
        "name": "random",
        "metric": "loss",
        "max_length": {"batches": MAX_LENGTH},
        "max_trials": max_trials,
        "max_concurrent_trials": 16,
    }


def asha_config(max_trials: int) -> dict[str, Any]:
    return {
        "name": "adaptive_asha",
        "metric": "loss",
        "max_length": {"batches": MAX_LENGTH},
        "max_trials": max_trials,
        "divisor": 4,
        "mode": "standard",
        "max_concurrent_trials": 16,
    }


def tpe_config(max_trials: int) -> dict[str, Any]:
    return {
        "name": "tpe",
        "metric": "loss",
        "max_length": {"batches": MAX_LENGTH},
        "max_trials": max_trials,
        "max_concurrent_trials": 1,
        "n_startup_trials": 8,
    }


def batches_to_best(side: int, seeds: list[int], max_trials: int) -> dict[str, list[int | None]]:
    out: dict[str, list[int | None]] = {"random": [], "adaptive_asha": []}
    for seed in seeds:
        for name, cfg in (("random", random_config), ("adaptive_asha", asha_config)):
            res = run_search(cfg(max_trials), side, seed, stop_at_best=True)
            out[name].append(res.batches_to_best)
    return out


def replays(side: int, seed: int, max_trials: int) -> bool:
    a = run_search(asha_config(max_trials), side, seed, stop_at_best=False)
    b = run_search(asha_config(max_trials), side, seed, stop_at_best=False)
    return a.trace == b.trace and len(a.trace) > 0


def same_budget(side: int, seeds: list[int], budget: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"tpe": [], "random": []}
    for seed in seeds:
        for name, cfg in (("tpe", tpe_config), ("random", random_config)):
            res = run_search(cfg(budget), side, seed, stop_at_best=False)
            out[name].append(res.best_final)
    return out


def _total(values: list[int | None], cap: int) -> int:
    return sum(cap if v is None else v for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--side", type=int, default=8, help="configurations per axis (8: 64)")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--max-trials", type=int, default=2000, help="cap for batches to best")
    parser.add_argument("--budget", type=int, default=24, help="full-length trials, tpe vs random")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seeds = list(range(args.seeds))
    side = args.side
    optimum = best_config(side)
    print(
        f"space: {side}x{side} = {side * side} configurations; best {optimum}, final loss "
        f"{final_loss(*optimum, side):.4f}; max_length {MAX_LENGTH} batches; seeds {seeds[0]}.."
        f"{seeds[-1]}"
    )

    found = batches_to_best(side, seeds, args.max_trials)
    cap = args.max_trials * MAX_LENGTH
    print("\nbatches until the best configuration has trained to max_length:")
    for name, values in found.items():
        got = [v for v in values if v is not None]
        print(
            f"  {name:14s} reached {len(got)}/{len(values)}  median {statistics.median(got):>9.0f}"
            f"  mean {statistics.fmean(got):>9.0f}  total {_total(values, cap):>10d}"
        )
    ratio_total = _total(found["adaptive_asha"], cap) / _total(found["random"], cap)
    per_seed = [
        (a if a is not None else cap) / (r if r is not None else cap)
        for a, r in zip(found["adaptive_asha"], found["random"], strict=True)
    ]
    print(
        f"  adaptive_asha / random: {ratio_total:.3f} of the batches (totals over seeds); "
        f"median per-seed ratio {statistics.median(per_seed):.3f}  (goal <= 0.35)"
    )

    same = replays(side, seeds[0], 200)
    print(f"\nadaptive_asha replays identically from seed {seeds[0]}: {same}")

    budget = same_budget(side, seeds, args.budget)
    tpe, rnd = statistics.fmean(budget["tpe"]), statistics.fmean(budget["random"])
    best = final_loss(*optimum, side)
    hits = {k: sum(1 for v in vs if v == best) for k, vs in budget.items()}
    print(
        f"\nsame budget ({args.budget} trials of {MAX_LENGTH} batches), best final loss, mean "
        f"over seeds (optimum {best:.4f}):"
    )
    print(f"  tpe    {tpe:.4f}  (found the optimum in {hits['tpe']}/{len(seeds)} seeds)")
    print(f"  random {rnd:.4f}  (found the optimum in {hits['random']}/{len(seeds)} seeds)")
    print(f"  tpe beats random: {tpe < rnd}")


if __name__ == "__main__":
    main()
