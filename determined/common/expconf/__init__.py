"""Experiment configs: parse, validate and fill defaults once (docs/config.md).

The master calls :func:`parse_experiment_config` on creation and stores
``ExperimentConfig.to_json_dict()``; trials receive that JSON in ``DET_EXPERIMENT_CONFIG``; the
CLI calls the same function to report problems before uploading anything.
"""

from __future__ import annotations

from determined.common.expconf._hparams import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    Hyperparameter,
    HyperparameterSpace,
    IntHP,
    LogHP,
    hyperparameters_to_json,
    iter_hyperparameters,
    parse_hyperparameters,
)
from determined.common.expconf._lengths import Length, Unit, searcher_unit
from determined.common.expconf._models import ExperimentConfig, default
from determined.common.expconf._parse import KNOWN_KEYS, parse_experiment_config
from determined.common.expconf._resources import (
    BindMount,
    Device,
    EnvironmentConfig,
    EnvironmentImage,
    EnvironmentVariables,
    ResourcesConfig,
    environment_dict,
)
from determined.common.expconf._searcher import (
    AdaptiveASHAConfig,
    AsyncHalvingConfig,
    CustomConfig,
    GridConfig,
    RandomConfig,
    SearcherConfig,
    SingleConfig,
    TPEConfig,
)
from determined.common.expconf._storage import (
    AzureConfig,
    CheckpointStorageConfig,
    DirectoryConfig,
    GCSConfig,
    S3Config,
    SharedFSConfig,
)
from determined.common.expconf._training import (
    OptimizationsConfig,
    ProfilingConfig,
    ReproducibilityConfig,
)
from determined.errors import InvalidExperimentConfig

__all__ = [
    "KNOWN_KEYS",
    "AdaptiveASHAConfig",
    "AsyncHalvingConfig",
    "AzureConfig",
    "BindMount",
    "CategoricalHP",
    "CheckpointStorageConfig",
    "ConstHP",
    "CustomConfig",
    "Device",
    "DirectoryConfig",
    "DoubleHP",
    "EnvironmentConfig",
    "EnvironmentImage",
    "EnvironmentVariables",
    "ExperimentConfig",
    "GCSConfig",
    "GridConfig",
    "Hyperparameter",
    "HyperparameterSpace",
    "IntHP",
    "InvalidExperimentConfig",
    "Length",
    "LogHP",
    "OptimizationsConfig",
    "ProfilingConfig",
    "RandomConfig",
    "ReproducibilityConfig",
    "ResourcesConfig",
    "S3Config",
    "SearcherConfig",
    "SharedFSConfig",
    "SingleConfig",
    "TPEConfig",
    "Unit",
    "default",
    "environment_dict",
    "hyperparameters_to_json",
    "iter_hyperparameters",
    "parse_experiment_config",
    "parse_hyperparameters",
    "searcher_unit",
]
