"""Hyperparameter search methods: pure, deterministic state machines the master drives.

The master builds one with :func:`make_search_method` from the experiment config, feeds it
trial events (``on_trial_created``, ``on_validation_completed``, ``on_trial_exited_early``,
``on_trial_closed``; :class:`SearchMethod` lists everything it uses) and carries out the
operations it returns (:class:`Create`, :class:`ValidateAfter`, :class:`Close`,
:class:`Shutdown`). After every event it can persist ``snapshot()``;
:func:`restore_search_method` continues the same search after a restart.
:func:`preview` simulates a search without training, for ``det preview-search``.
"""

from determined.master.searcher._adaptive_asha import (
    AdaptiveASHASearch,
    ASHASearch,
    Bracket,
    plan_brackets,
)
from determined.master.searcher._custom import CustomSearch, EventQueue
from determined.master.searcher._factory import (
    make_search_method,
    max_length_units,
    optional_max_length,
    restore_search_method,
)
from determined.master.searcher._grid import GridSearch
from determined.master.searcher._hparams import grid, parse_hyperparameters, sample
from determined.master.searcher._method import SearcherBase, SearchMethod
from determined.master.searcher._nprand import NpRand
from determined.master.searcher._operations import (
    Close,
    Create,
    ExitedReason,
    Operation,
    Shutdown,
    ValidateAfter,
    operation_from_dict,
    operation_to_dict,
)
from determined.master.searcher._preview import Preview, PreviewTrial, preview
from determined.master.searcher._random import RandomSearch, SingleSearch
from determined.master.searcher._tpe import TPESearch

__all__ = [
    "ASHASearch",
    "AdaptiveASHASearch",
    "Bracket",
    "Close",
    "Create",
    "CustomSearch",
    "EventQueue",
    "ExitedReason",
    "GridSearch",
    "NpRand",
    "Operation",
    "Preview",
    "PreviewTrial",
    "RandomSearch",
    "SearchMethod",
    "SearcherBase",
    "Shutdown",
    "SingleSearch",
    "TPESearch",
    "ValidateAfter",
    "grid",
    "make_search_method",
    "max_length_units",
    "optional_max_length",
    "operation_from_dict",
    "operation_to_dict",
    "parse_hyperparameters",
    "plan_brackets",
    "preview",
    "restore_search_method",
    "sample",
]
