"""redetermined: Determined's training API, maintained.

``import determined as det`` gives the names that Determined 0.37 user code uses.
"""

from determined import errors
from determined._info import (
    ClusterInfo,
    RendezvousInfo,
    ResourcesInfo,
    TrialInfo,
    get_cluster_info,
)
from determined._trial import InvalidHP, LegacyTrial
from determined._version import __version__

LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"

__all__ = [
    "ClusterInfo",
    "InvalidHP",
    "LOG_FORMAT",
    "LegacyTrial",
    "RendezvousInfo",
    "ResourcesInfo",
    "TrialInfo",
    "__version__",
    "errors",
    "get_cluster_info",
]

# `import determined as det; det.core.init()` works, as in Determined (imported last: core
# uses the names above).
from determined import core as core  # noqa: E402
