"""Determined 0.37's ``determined.experimental``: the Python SDK (``client``) and its classes
re-exported under the names 0.37 has (``Checkpoint``, ``Determined``, ``Experiment``, ...), with
the module paths ``determined.experimental.checkpoint``, ``.metrics`` and ``.model``."""

from determined._execution import test_one_batch
from determined.experimental import checkpoint, client, metrics, model
from determined.experimental._sdk._checkpoint import Checkpoint
from determined.experimental._sdk._determined import Determined
from determined.experimental._sdk._enums import (
    ModelOrderBy,
    ModelSortBy,
    OrderBy,
    TrialOrderBy,
    TrialSortBy,
)
from determined.experimental._sdk._experiment import Experiment, Trial
from determined.experimental._sdk._model import Model, ModelVersion
from determined.experimental._sdk._project import Project

# 0.37's deprecated names of Experiment and Trial.
ExperimentReference = Experiment
TrialReference = Trial

__all__ = [
    "Checkpoint",
    "Determined",
    "Experiment",
    "ExperimentReference",
    "Model",
    "ModelOrderBy",
    "ModelSortBy",
    "ModelVersion",
    "OrderBy",
    "Project",
    "Trial",
    "TrialOrderBy",
    "TrialReference",
    "TrialSortBy",
    "checkpoint",
    "client",
    "metrics",
    "model",
    "test_one_batch",
]
