"""redetermined: Determined's training API, maintained.

``import determined as det`` gives the names that Determined 0.37 user code uses.
"""

# Private names: this namespace is the public API (tests/core/test_core_exports.py).
import importlib as _importlib
import types as _types
import typing as _typing

from determined import errors
from determined._env_context import EnvContext
from determined._experiment_config import ExperimentConfig
from determined._import import import_from_path
from determined._info import (
    ClusterInfo,
    RendezvousInfo,
    ResourcesInfo,
    TrialInfo,
    get_cluster_info,
)
from determined._trial import InvalidHP, LegacyTrial
from determined._trial_context import TrialContext
from determined._trial_controller import TrialController
from determined._trial_controller import _DistributedBackend as _DistributedBackend
from determined._version import __version__

LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"

__all__ = [
    "ClusterInfo",
    "EnvContext",
    "ExperimentConfig",
    "InvalidHP",
    "LOG_FORMAT",
    "LegacyTrial",
    "RendezvousInfo",
    "ResourcesInfo",
    "TrialContext",
    "TrialController",
    "TrialInfo",
    "__version__",
    "errors",
    "get_cluster_info",
    "import_from_path",
    "util",
]

# `import determined as det; det.core.init()` works, as in Determined, but the Core API (zmq,
# numpy, TensorBoard) loads on first use: every layer imports this package (`from determined
# import errors`), and the CLI, the SDK's client and the master never need it. The other
# sub-packages 0.37's `import determined` makes attributes load on first use too.
_ON_FIRST_USE = ("core", "util", "common", "tensorboard", "workload")
_LAZY = {name: f"determined.{name}" for name in _ON_FIRST_USE}

if _typing.TYPE_CHECKING:
    from determined import common as common
    from determined import core as core
    from determined import tensorboard as tensorboard
    from determined import util as util
    from determined import workload as workload


def __getattr__(name: str) -> _types.ModuleType:
    if name not in _LAZY:
        raise AttributeError(f"module 'determined' has no attribute {name!r}")
    return _importlib.import_module(_LAZY[name])


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
