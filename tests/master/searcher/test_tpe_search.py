"""tpe: optuna's TPE as the sampler, deterministic, restorable, and better than random."""

from __future__ import annotations

import sys

import pytest
from _kit.searcher_driver import Driver

from determined.errors import InvalidSearcherConfig
from determined.master.searcher import Create, make_search_method

pytest.importorskip("optuna")

HP = {
    "x": {"type": "double", "minval": -5.0, "maxval": 5.0},
    "k": {"type": "int", "minval": 0, "maxval": 8},
    "g": {"inner": {"type": "categorical", "vals": [[1], "b", None]}},
    "lr": {"type": "log", "minval": -3, "maxval": 0, "base": 10},
}


def _loss(rng, hp, length):  # noqa: ANN001, ANN202
    return (hp["x"] - 1.5) ** 2 + (hp["k"] - 6) ** 2 / 4.0 + 0.001 * rng.random()


def test_tpe_samples_the_space_and_is_deterministic() -> None:
    cfg = {
        "name": "tpe",
        "metric": "loss",
        "max_length": 10,
        "max_trials": 14,
        "max_concurrent_trials": 2,
        "n_startup_trials": 4,
    }
    a = Driver(cfg, HP, 5, order_seed=2, metric=_loss).drive()
    b = Driver(cfg, HP, 5, order_seed=2, metric=_loss).drive()
    assert a.trace == b.trace and len(a.creates) == 14
    for c in a.creates:
        assert -5 <= c.hparams["x"] < 5 and 0 <= c.hparams["k"] <= 8
        assert c.hparams["g"]["inner"] in ([1], "b", None)
        assert 10**-3 <= c.hparams["lr"] <= 1


@pytest.mark.parametrize("restart_at", [3, 17, 40])
def test_tpe_restore_replays_the_study(restart_at: int) -> None:
    cfg = {
        "name": "tpe",
        "metric": "loss",
        "max_length": 27,
        "max_trials": 12,
        "max_concurrent_trials": 3,
        "n_startup_trials": 3,
        "num_rungs": 3,
        "divisor": 3,
    }
    straight = Driver(cfg, HP, 9, order_seed=4, metric=_loss, exit_rate=0.05).drive()
    restarted = Driver(
        cfg, HP, 9, order_seed=4, metric=_loss, exit_rate=0.05, restart_at=restart_at
    ).drive()
    assert restarted.trace == straight.trace


def test_tpe_beats_random_on_the_same_budget() -> None:
    best = {}
    for name in ("tpe", "random"):
        cfg = {
            "name": name,
            "metric": "loss",
            "max_length": 1,
            "max_trials": 30,
            "max_concurrent_trials": 1,
            "n_startup_trials": 8,
        }
        if name == "random":
            cfg.pop("n_startup_trials")
        scores = []
        for seed in range(3):
            run = Driver(cfg, HP, seed, metric=_loss).drive()
            scores.append(min(min(v) for v in run.metrics.values()))
        best[name] = sum(scores) / len(scores)
    assert best["tpe"] < best["random"]


def test_missing_optuna_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(InvalidSearcherConfig, match=r"redetermined\[tpe\]"):
        make_search_method({"name": "tpe", "metric": "m", "max_length": 1, "max_trials": 1}, HP, 0)


def test_tpe_larger_is_better() -> None:
    cfg = {
        "name": "tpe",
        "metric": "acc",
        "smaller_is_better": False,
        "max_length": 1,
        "max_trials": 25,
        "max_concurrent_trials": 1,
        "n_startup_trials": 6,
    }
    run = Driver(cfg, HP, 1, metric=lambda r, hp, n: -_loss(r, hp, n)).drive()
    xs = [c.hparams["x"] for c in run.creates if isinstance(c, Create)]
    late = sum(abs(x - 1.5) for x in xs[-8:]) / 8
    early = sum(abs(x - 1.5) for x in xs[:6]) / 6
    assert late < early
