"""preview: the simulated search ``det preview-search`` prints."""

from __future__ import annotations

import json

import determined.master.searcher as searcher
from determined.master.searcher import preview

HP = {"x": {"type": "int", "minval": 0, "maxval": 3, "count": 4}, "y": [1]}


def test_adaptive_preview_matches_the_bracket_plan() -> None:
    cfg = {
        "name": "adaptive_asha",
        "metric": "loss",
        "max_length": {"batches": 1000},
        "max_trials": 16,
    }
    p = preview(cfg, HP, 42)
    assert p.total_trials == 16 and p.unit == "batches"
    assert p.rung_lengths == [[62, 250, 1000], [250, 1000]]
    by_bracket = {}
    for t in p.trials:
        by_bracket.setdefault(t.bracket, {})[t.lengths] = t.occurrences
    # 12 trials in bracket 1: 3 reach 250 (12 // 4), none reach 1000 (3 // 4 == 0).
    assert by_bracket[0] == {(62,): 9, (62, 250): 3}
    assert by_bracket[1] == {(250,): 3, (250, 1000): 1}
    text = p.render()
    assert "This search will create a total of 16 trial(s)." in text
    assert "Bracket 1: 12 trial(s); rungs at 62, 250, 1000 batches" in text


def test_preview_is_deterministic_and_json() -> None:
    cfg = {
        "name": "async_halving",
        "metric": "loss",
        "num_rungs": 3,
        "max_length": 90,
        "max_trials": 30,
        "divisor": 3,
    }
    a, b = preview(cfg, HP, 7), preview(cfg, HP, 7)
    assert a == b
    data = json.loads(json.dumps(a.to_dict()))
    assert data["total_trials"] == 30
    assert sum(t["occurrences"] for t in data["trials"]) == 30


def test_grid_and_time_metric_previews() -> None:
    g = preview({"name": "grid", "metric": "m", "max_length": 5}, HP, 0)
    assert [(t.lengths, t.occurrences) for t in g.trials] == [((5,), 4)]
    t = preview(
        {
            "name": "adaptive_asha",
            "metric": "m",
            "time_metric": "batches",
            "max_time": 81,
            "max_trials": 9,
            "divisor": 3,
            "mode": "aggressive",
        },
        HP,
        0,
    )
    assert t.unit == "batches" and t.total_trials == 9
    assert all(ls.lengths[-1] <= 81 for ls in t.trials)


def test_exports_match_all() -> None:
    public = {n for n in dir(searcher) if not n.startswith("_")}
    assert public == set(searcher.__all__)
