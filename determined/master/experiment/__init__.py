"""The experiment domain: experiments and trials driven by their search methods, the state
table and the allocation exit decision, and the master's reading of experiment configs.

Layering: imports ``store`` and ``searcher`` (and the master's top-level ``_errors`` and
``_signals``), nothing above.
"""

from determined.master.experiment._config import (
    check_size,
    load_yaml,
    merge_configs,
    parse_config,
    parse_unmanaged_config,
    searcher_metric,
)
from determined.master.experiment._container_defaults import (
    ContainerDefaults,
    ContainerDefaultsError,
)
from determined.master.experiment._events import preemption_key, searcher_events_key
from determined.master.experiment._experiments import Experiments
from determined.master.experiment._log_policies import scan as scan_log_policies
from determined.master.experiment._states import ExitDecision, decide_exit
from determined.master.experiment._unmanaged import UNMANAGED_TRIAL_TIMEOUT_S, TrialStart
from determined.master.store import State

__all__ = [
    "UNMANAGED_TRIAL_TIMEOUT_S",
    "ContainerDefaults",
    "ContainerDefaultsError",
    "ExitDecision",
    "Experiments",
    "State",
    "TrialStart",
    "check_size",
    "decide_exit",
    "load_yaml",
    "merge_configs",
    "parse_config",
    "parse_unmanaged_config",
    "preemption_key",
    "scan_log_policies",
    "searcher_events_key",
    "searcher_metric",
]
