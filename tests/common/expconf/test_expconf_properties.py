"""Hypothesis: random valid configs round-trip stably; random invalid ones raise only
InvalidExperimentConfig, naming a key path."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from determined.common import expconf
from determined.common.expconf import InvalidExperimentConfig, parse_experiment_config

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 10), st.floats(-1e3, 1e3), st.text(max_size=5)
)


@st.composite
def ranges(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    lo = draw(st.integers(-50, 50))
    hi = lo + draw(st.integers(1, 50))
    hp: dict[str, Any] = {"type": kind, "minval": lo, "maxval": hi}
    if kind == "log":
        hp["base"] = draw(st.sampled_from([2, 10, 2.718]))
    if kind in ("double", "log"):
        hp["minval"], hp["maxval"] = lo / 4, hi / 4
    hp["count"] = draw(st.integers(1, 5))
    return hp


leaves = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    scalars.map(lambda v: {"type": "const", "val": v}),
    st.sampled_from(["int", "double", "log"]).flatmap(ranges),
    st.lists(scalars, min_size=1, max_size=4).map(lambda v: {"type": "categorical", "vals": v}),
)
spaces = st.recursive(
    st.dictionaries(names, leaves, max_size=4),
    lambda inner: st.dictionaries(names, st.one_of(leaves, inner), min_size=1, max_size=3),
    max_leaves=10,
)
lengths = st.one_of(
    st.integers(0, 10**6),
    st.builds(lambda k, v: {k: v}, st.sampled_from(["batches", "epochs", "records"]),
              st.integers(1, 10**6)),
)  # fmt: skip


@st.composite
def searchers(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.sampled_from(["single", "random", "grid", "async_halving", "adaptive_asha",
                                 "tpe", "custom"]))  # fmt: skip
    out: dict[str, Any] = {"name": name, "metric": draw(names)}
    if draw(st.booleans()):
        out["smaller_is_better"] = draw(st.booleans())
    if name != "custom":
        out["max_length"] = draw(lengths)
    if name in ("random", "async_halving", "adaptive_asha", "tpe"):
        out["max_trials"] = draw(st.integers(1, 100))
        out["max_concurrent_trials"] = draw(st.integers(0, 20))
    if name in ("async_halving", "adaptive_asha", "tpe"):
        out["divisor"] = draw(st.sampled_from([2, 3, 4.5]))
    if name == "async_halving":
        out["num_rungs"] = draw(st.integers(1, 5))
    if name == "adaptive_asha":
        out["mode"] = draw(st.sampled_from(["aggressive", "standard", "conservative"]))
        out["bracket_rungs"] = draw(st.lists(st.integers(1, 5), max_size=3))
    return out


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "entrypoint": draw(st.sampled_from(["model_def:Trial", "python3 train.py", ["a", "b"]])),
        "searcher": draw(searchers()),
        "hyperparameters": draw(spaces),
    }
    optional = {
        "name": names,
        "description": st.one_of(st.none(), st.text(max_size=10)),
        "labels": st.lists(names, max_size=3),
        "data": st.dictionaries(names, scalars, max_size=3),
        "max_restarts": st.integers(0, 10),
        "scheduling_unit": st.integers(1, 1000),
        "records_per_epoch": st.integers(0, 1000),
        "checkpoint_policy": st.sampled_from(["best", "all", "none"]),
        "min_validation_period": st.builds(lambda v: {"batches": v}, st.integers(0, 100)),
        "resources": st.fixed_dictionaries({"slots_per_trial": st.integers(0, 8)}),
        "reproducibility": st.fixed_dictionaries({"experiment_seed": st.integers(0, 2**32 - 1)}),
        "checkpoint_storage": st.fixed_dictionaries({"save_trial_best": st.integers(0, 5)}),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            raw[key] = draw(strategy)
    return raw


@settings(max_examples=150, deadline=None)
@given(configs())
def test_valid_configs_round_trip_stably(raw: dict[str, Any]) -> None:
    config = parse_experiment_config(raw)
    data = config.to_json_dict()
    again = parse_experiment_config(data)
    assert again == config
    assert again.to_json_dict() == data
    assert expconf.searcher_unit(data) == expconf.searcher_unit(config)


json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(names, st.integers()), inner, max_size=3),
    ),
    max_leaves=12,
)
keys = st.sampled_from(sorted(expconf.KNOWN_KEYS) + ["bogus"])
SEARCHER_KEYS = ["name", "metric", "max_length", "max_trials", "divisor", "mode", "bogus"]


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    raw = draw(configs())
    for _ in range(draw(st.integers(1, 3))):
        target = draw(st.sampled_from(["top", "searcher", "hyperparameters"]))
        value = draw(json_values)
        if target == "top":
            raw[draw(keys)] = value
        elif target == "searcher":
            # An earlier "top" mutation may have replaced the searcher with a non-mapping.
            searcher = raw.get("searcher")
            searcher = dict(searcher) if isinstance(searcher, dict) else {}
            searcher[draw(st.sampled_from(SEARCHER_KEYS))] = value
            raw["searcher"] = searcher
        else:
            hps = raw.get("hyperparameters")
            raw["hyperparameters"] = {draw(names): value} | (hps if isinstance(hps, dict) else {})
    return raw


@settings(max_examples=300, deadline=None)
@given(mutated())
def test_random_configs_never_crash(raw: dict[str, Any]) -> None:
    try:
        config = parse_experiment_config(raw)
    except InvalidExperimentConfig as e:
        assert e.problems
        for path, message in e.problems:
            assert isinstance(path, str) and message
        assert str(e).startswith("invalid experiment config:\n")
    else:
        assert parse_experiment_config(config.to_json_dict()) == config


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=60))
def test_random_yaml_text_never_crashes(text: str) -> None:
    try:
        parse_experiment_config(text)
    except InvalidExperimentConfig as e:
        assert e.problems
