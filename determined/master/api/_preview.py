"""What a search would do, without training: the legacy ``POST /searcher/preview`` that the
reference's ``det preview-search`` calls, and ``POST /api/v1/preview-hp-search``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body

from determined import errors
from determined.master import experiment, searcher
from determined.master._errors import InvalidArgument
from determined.master.api._auth import Caller
from determined.master.api._models import PreviewSearch

router = APIRouter()


def _simulate(raw: Any, seed: int | None = None) -> tuple[dict[str, Any], searcher.Preview]:
    """The defaulted config and its preview (with ``seed``, else the config's experiment seed).
    The entrypoint is not needed to preview a search, so a config without one is accepted."""
    if not isinstance(raw, dict):
        raise InvalidArgument("the body must be an experiment config (a JSON object)")
    if not isinstance(raw.get("searcher"), dict):
        raise InvalidArgument("Experiment configuration must have 'searcher' section")
    typed = experiment.parse_config({"entrypoint": "preview", **raw})
    config = typed.to_json_dict()
    if seed is None:
        seed = typed.reproducibility.experiment_seed
    try:
        found = searcher.preview(config["searcher"], config.get("hyperparameters"), seed)
    except errors.InvalidSearcherConfig as e:
        raise InvalidArgument(str(e)) from e
    return config, found


def _by_lengths(found: searcher.Preview) -> dict[tuple[int, ...], int]:
    counts: dict[tuple[int, ...], int] = {}
    for t in found.trials:
        counts[t.lengths] = counts.get(t.lengths, 0) + t.occurrences
    return counts


@router.post("/searcher/preview")
def legacy_preview(caller: Caller, body: Any = Body(...)) -> dict[str, Any]:
    """Body: the experiment config as JSON. ``{results: {"<length> <length> ...": trials},
    seed}``: how many trials validate at each sequence of lengths."""
    _, found = _simulate(body)
    results = {" ".join(str(n) for n in k): v for k, v in _by_lengths(found).items()}
    return {"results": results, "seed": found.seed}


@router.post("/api/v1/preview-hp-search")
def preview_hp_search(body: PreviewSearch, caller: Caller) -> dict[str, Any]:
    """``{simulation: {config, seed, trials: [{operations, occurrences}]}}``; as 0.37's
    ``v1RunnableOperation``, each validation is a TRAIN to its (absolute) length, then a
    VALIDATE."""
    config, found = _simulate(body.config, body.seed)
    trials = [
        {
            "operations": [op for n in lengths for op in _train_then_validate(n)],
            "occurrences": count,
        }
        for lengths, count in _by_lengths(found).items()
    ]
    return {"simulation": {"config": config, "seed": found.seed, "trials": trials}}


def _train_then_validate(length: int) -> list[dict[str, str]]:
    return [
        {"type": "RUNNABLE_TYPE_TRAIN", "length": str(length)},
        {"type": "RUNNABLE_TYPE_VALIDATE", "length": "0"},
    ]
