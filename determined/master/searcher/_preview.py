"""``preview``: run a search against simulated trials, without training (``det preview-search``).

Each simulated validation reports a random metric; trials are served in a seeded random order.
Both come from one MT19937 stream seeded with the experiment seed, so a preview is
reproducible (the reference seeds its simulation from the clock).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from determined.errors import InternalException, InvalidSearcherConfig
from determined.master.searcher._factory import make_search_method
from determined.master.searcher._method import SearcherBase
from determined.master.searcher._nprand import NpRand
from determined.master.searcher._operations import Close, Create, Operation, Shutdown, ValidateAfter

_MAX_EVENTS = 1_000_000


@dataclass(frozen=True)
class PreviewTrial:
    """``occurrences`` trials of bracket ``bracket`` that validate at these ``lengths``."""

    bracket: int
    lengths: tuple[int, ...]
    occurrences: int


@dataclass(frozen=True)
class Preview:
    """What a search would do: trials grouped by the lengths they train to, per bracket. A
    search without ``max_length`` has one bracket with no rungs (``rung_lengths == [[]]``) and
    its trials validate at no length the searcher chose (``lengths == ()``)."""

    searcher: str
    seed: int
    unit: str
    rung_lengths: list[list[int]]
    trials: list[PreviewTrial] = field(default_factory=list)

    @property
    def total_trials(self) -> int:
        return sum(t.occurrences for t in self.trials)

    def to_dict(self) -> dict[str, Any]:
        return {
            "searcher": self.searcher,
            "seed": self.seed,
            "unit": self.unit,
            "total_trials": self.total_trials,
            "brackets": [
                {"bracket": i, "rung_lengths": lengths}
                for i, lengths in enumerate(self.rung_lengths)
            ],
            "trials": [
                {"bracket": t.bracket, "lengths": list(t.lengths), "occurrences": t.occurrences}
                for t in self.trials
            ],
        }

    def render(self) -> str:
        """Human-readable text: per bracket, how many trials train how far."""
        lines = [f"This search will create a total of {self.total_trials} trial(s)."]
        for b, lengths in enumerate(self.rung_lengths):
            mine = [t for t in self.trials if t.bracket == b]
            count = sum(t.occurrences for t in mine)
            head = f"Bracket {b + 1}: " if len(self.rung_lengths) > 1 else ""
            if not lengths:
                # 0.38 style without searcher.max_length: the master asks for no length
                lines.append(
                    f"{head}{count} trial(s); each trains to the length it decides itself "
                    "(no searcher.max_length; e.g. Trainer.fit(max_length=...))"
                )
                continue
            rungs = ", ".join(str(x) for x in lengths)
            lines.append(f"{head}{count} trial(s); rungs at {rungs} {self.unit}")
            for t in sorted(mine, key=lambda t: (len(t.lengths), t.lengths)):
                steps = " -> ".join(str(x) for x in t.lengths) or "no training"
                lines.append(f"  {t.occurrences:>5} x train to {steps} {self.unit}")
        return "\n".join(lines)


def _unit(searcher_config: Mapping[str, Any]) -> str:
    if searcher_config.get("time_metric"):
        return str(searcher_config["time_metric"])
    raw = searcher_config.get("max_length")
    if isinstance(raw, Mapping) and len(raw) == 1:
        return str(next(iter(raw)))
    return "units"


def simulate(method: SearcherBase, seed: int) -> dict[str, list[int]]:
    """Drive ``method`` to its Shutdown with random metrics; the lengths each trial validated at,
    by request id in creation order."""
    rand = NpRand(seed)
    queues: dict[str, list[Operation]] = {}
    lengths: dict[str, list[int]] = {}
    checkpoints = sorted({x for bracket in method.rung_lengths for x in bracket})
    pending = list(method.initial_operations())
    for _ in range(_MAX_EVENTS):
        for op in pending:
            if isinstance(op, Shutdown):
                return lengths
            if isinstance(op, Create):
                lengths[op.request_id] = []
            queues.setdefault(op.request_id, []).append(op)
        ready = [r for r, q in queues.items() if q]
        if not ready:
            raise InternalException("the search stalled: no trial has work and no Shutdown came")
        rid = ready[rand.intn(len(ready))]
        op = queues[rid].pop(0)
        if isinstance(op, Create):
            pending = method.on_trial_created(rid)
        elif isinstance(op, Close):
            del queues[rid]
            pending = method.on_trial_closed(rid)
        elif isinstance(op, ValidateAfter) and method.every_validation:
            pending = _report_until_stopped(method, rid, op.length, checkpoints, rand, lengths)
        elif isinstance(op, ValidateAfter):
            lengths[rid].append(op.length)
            pending = method.on_validation_completed(rid, rand.unit_interval(), op.length)
    raise InternalException(f"the search did not finish within {_MAX_EVENTS} simulated events")


def _report_until_stopped(
    method: SearcherBase,
    rid: str,
    length: int,
    checkpoints: list[int],
    rand: NpRand,
    lengths: dict[str, list[int]],
) -> list[Operation]:
    # 0.38 style: the trial validates at every rung length until the searcher stops it.
    ops: list[Operation] = []
    for step in [c for c in checkpoints if c <= length]:
        lengths[rid].append(step)
        ops = method.on_validation_completed(rid, rand.unit_interval(), step)
        if any(isinstance(op, Close) and op.request_id == rid for op in ops):
            return ops
    return [*ops, Close(rid)]


def preview(
    searcher_config: Mapping[str, Any],
    hyperparameters: Mapping[str, Any] | None,
    seed: int,
) -> Preview:
    """Simulate the search ``searcher_config`` describes, without training anything.

    Pure and deterministic in its arguments. Called by the master's preview endpoint and by
    ``det preview-search``.

    Raises:
        InvalidSearcherConfig: the config does not describe a valid search.
    """
    method = make_search_method(searcher_config, hyperparameters, seed)
    if not isinstance(method, SearcherBase):
        raise InvalidSearcherConfig(
            "a custom search (searcher.name: custom) is decided by its search runner outside "
            "the master, so it cannot be previewed"
        )
    by_trial = simulate(method, seed)
    groups: dict[tuple[int, tuple[int, ...]], int] = {}
    for rid, ls in by_trial.items():
        key = (method.bracket_of(rid), tuple(ls))
        groups[key] = groups.get(key, 0) + 1
    trials = [PreviewTrial(b, ls, n) for (b, ls), n in groups.items()]
    return Preview(
        searcher=str(searcher_config.get("name")),
        seed=int(seed),
        unit=_unit(searcher_config),
        rung_lengths=method.rung_lengths,
        trials=trials,
    )
