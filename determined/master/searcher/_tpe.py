"""``tpe``: Bayesian search with optuna's TPE sampler (optional extra ``redetermined[tpe]``).

Trials are asked from an optuna study and told their searcher metric (ask-and-tell). With
``num_rungs > 1`` the search early-stops trials as stop-based ASHA does, and stopped trials are
told as pruned with their intermediate values, which TPE uses. The study lives in memory;
a snapshot keeps the ask/report/tell log, and restoring replays it into a fresh study with the
same seed, which puts optuna's sampler in exactly the same state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from determined.errors import InvalidSearcherConfig
from determined.master.searcher import _hparams
from determined.master.searcher._asha_stopping import AshaStoppingCore, AshaTimeCore
from determined.master.searcher._method import SearcherBase
from determined.master.searcher._method_core import Sampler
from determined.master.searcher._nprand import NpRand


def _import_optuna() -> Any:
    try:
        import optuna
    except ImportError as e:
        raise InvalidSearcherConfig(
            "the tpe searcher needs optuna, which is not installed; install the extra with "
            "`pip install 'redetermined[tpe]'` or pick another searcher"
        ) from e
    return optuna


class TPESampler(Sampler):
    """Draws points from an optuna study with a seeded TPE sampler."""

    def __init__(
        self,
        space: _hparams.HyperparameterSpace,
        *,
        seed: int,
        smaller_is_better: bool,
        n_startup_trials: int,
    ) -> None:
        self._optuna = _import_optuna()
        self._seed = seed
        self._direction = "minimize" if smaller_is_better else "maximize"
        self._n_startup = n_startup_trials
        self._leaves = _hparams.leaves(space)
        self._dists = self._distributions()
        self._reset()

    def _distributions(self) -> dict[str, Any]:
        d = self._optuna.distributions
        out: dict[str, Any] = {}
        for path, hp in self._leaves:
            key = "/".join(path)
            if isinstance(hp, _hparams.Int):
                out[key] = d.IntDistribution(hp.minval, hp.maxval)
            elif isinstance(hp, (_hparams.Double, _hparams.Log)):
                out[key] = d.FloatDistribution(hp.minval, hp.maxval)  # log: the exponent
            elif isinstance(hp, _hparams.Categorical):
                out[key] = d.CategoricalDistribution(list(range(len(hp.vals))))
        return out

    def _reset(self) -> None:
        sampler = self._optuna.samplers.TPESampler(
            seed=self._seed, n_startup_trials=self._n_startup
        )
        self._study = self._optuna.create_study(direction=self._direction, sampler=sampler)
        self._trials: dict[int, Any] = {}
        self._told: set[int] = set()
        self._reported: dict[int, set[int]] = {}
        self._numbers: dict[str, int] = {}
        self._log: list[list[Any]] = []

    def _ask(self) -> Any:
        trial = self._study.ask(self._dists)
        self._trials[trial.number] = trial
        self._log.append(["ask"])
        return trial

    def sample(self, space: _hparams.HyperparameterSpace, rand: NpRand) -> tuple[dict, Any]:
        trial = self._ask()
        point: dict[str, Any] = {}
        for path, hp in self._leaves:
            key = "/".join(path)
            if isinstance(hp, _hparams.Const):
                value = hp.val
            elif isinstance(hp, _hparams.Log):
                value = hp.base ** trial.params[key]
            elif isinstance(hp, _hparams.Categorical):
                value = hp.vals[trial.params[key]]
            else:
                value = trial.params[key]
            _hparams.set_path(point, path, value)
        return point, trial.number

    def bind(self, handle: Any, request_id: str) -> None:
        self._numbers[request_id] = int(handle)
        self._log.append(["bind", request_id, int(handle)])

    def _do_report(self, number: int, step: int, value: float) -> None:
        steps = self._reported.setdefault(number, set())
        if number not in self._told and step not in steps:
            steps.add(step)
            self._trials[number].report(value, step)

    def _do_tell(self, number: int, state: str, value: float | None) -> None:
        if number in self._told:
            return
        self._told.add(number)
        ts = self._optuna.trial.TrialState
        if state == "complete":
            self._study.tell(number, value)
        else:
            self._study.tell(number, state=ts.PRUNED if state == "pruned" else ts.FAIL)

    def report(self, request_id: str, length: int, metric: float) -> None:
        number = self._numbers[request_id]
        self._do_report(number, length, metric)
        self._log.append(["report", number, length, metric])

    def _tell(self, request_id: str, state: str, value: float | None = None) -> None:
        number = self._numbers.get(request_id)
        if number is not None:
            self._do_tell(number, state, value)
            self._log.append(["tell", number, state, value])

    def finish(self, request_id: str, metric: float) -> None:
        self._tell(request_id, "complete", metric)

    def prune(self, request_id: str) -> None:
        self._tell(request_id, "pruned")

    def fail(self, request_id: str) -> None:
        self._tell(request_id, "fail")

    def state(self) -> Any:
        return {"log": [list(e) for e in self._log]}

    def load_state(self, state: Any) -> None:
        self._reset()
        for entry in state["log"]:
            kind = entry[0]
            if kind == "ask":
                self._ask()
            elif kind == "bind":
                self._numbers[entry[1]] = int(entry[2])
                self._log.append(list(entry))
            elif kind == "report":
                self._do_report(int(entry[1]), int(entry[2]), float(entry[3]))
                self._log.append(list(entry))
            else:
                self._do_tell(int(entry[1]), entry[2], entry[3])
                self._log.append(list(entry))


class TPESearch(SearcherBase):
    """``tpe``: ``max_trials`` trials whose hyperparameters come from optuna's TPE, at most
    ``max_concurrent_trials`` at a time (TPE learns only from finished trials, so fewer
    concurrent trials make later ones better informed). ``num_rungs > 1`` adds stop-based ASHA
    early stopping with ``divisor``. Raises InvalidSearcherConfig without optuna installed.
    """

    def __init__(
        self,
        *,
        max_length: int,
        max_trials: int,
        max_concurrent_trials: int = 16,
        num_rungs: int = 1,
        divisor: float = 4.0,
        smaller_is_better: bool = True,
        n_startup_trials: int = 10,
        time_metric: str | None = None,
        hparams: Mapping[str, Any] | None,
        seed: int,
    ) -> None:
        space = _hparams.parse_hyperparameters(hparams)
        sampler = TPESampler(
            space,
            seed=int(seed) & 0xFFFFFFFF,
            smaller_is_better=smaller_is_better,
            n_startup_trials=n_startup_trials,
        )
        core_cls = AshaTimeCore if time_metric else AshaStoppingCore
        core = core_cls(
            max_length=max_length,
            max_trials=max_trials,
            num_rungs=num_rungs,
            divisor=divisor,
            max_concurrent_trials=max_concurrent_trials,
            smaller_is_better=smaller_is_better,
        )
        super().__init__(core, space, seed, kind="tpe", sampler=sampler)

    @classmethod
    def from_config(
        cls,
        cfg: Mapping[str, Any],
        asha_args: dict[str, Any],
        hparams: Mapping[str, Any] | None,
        seed: int,
    ) -> TPESearch:
        """Build from a ``searcher: {name: tpe, ...}`` section (see docs/master/searchers.md)."""
        args = {k: v for k, v in asha_args.items() if k != "stop_once"}
        num_rungs = cfg.get("num_rungs", 1)
        startup = cfg.get("n_startup_trials", 10)
        for key, value in (("num_rungs", num_rungs), ("n_startup_trials", startup)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidSearcherConfig(
                    f"searcher.{key} must be an integer >= 1, got {value!r}"
                )
        return cls(
            **args, num_rungs=num_rungs, n_startup_trials=startup, hparams=hparams, seed=seed
        )
