"""Custom hyperparameter search methods (Determined 0.37's ``determined.searcher``): a
``SearchMethod`` decides, a search runner carries its operations to the master's
``searcher: {name: custom}`` experiment (docs/reference/custom_searchers.md)."""

from determined.searcher._remote_search_runner import RemoteSearchRunner
from determined.searcher._search_method import (
    Close,
    Create,
    ExitedReason,
    Operation,
    Progress,
    SearcherState,
    SearchMethod,
    Shutdown,
    ValidateAfter,
)
from determined.searcher._search_runner import LocalSearchRunner, SearchRunner

__all__ = [
    "Close",
    "Create",
    "ExitedReason",
    "LocalSearchRunner",
    "Operation",
    "Progress",
    "RemoteSearchRunner",
    "SearchMethod",
    "SearchRunner",
    "SearcherState",
    "Shutdown",
    "ValidateAfter",
]
