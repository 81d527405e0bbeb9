"""determined.common.util's reserved metric-group names, which 0.37's trial code and its own e2e
fixtures (core_api/11_generic_metrics.py) read from there."""

from __future__ import annotations

from determined.common import util
from determined.core import _train


def test_the_legacy_group_names_are_those_the_core_api_reports_under() -> None:
    assert (util._LEGACY_TRAINING, util._LEGACY_VALIDATION, util._INFERENCE) == (
        "training",
        "validation",
        "inference",
    )
    assert util._LEGACY_TRAINING == _train.TRAINING
    assert util._LEGACY_VALIDATION == _train.VALIDATION
