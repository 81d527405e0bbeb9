"""redetermined: Determined's training API, maintained.

``import determined as det`` gives the names that Determined 0.37 user code uses.
"""

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

# `import determined as det; det.core.init()` works, as in Determined (imported last: core
# uses the names above).
from determined import core as core  # noqa: E402
from determined import util as util  # noqa: E402
