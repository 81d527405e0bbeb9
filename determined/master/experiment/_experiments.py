"""``Experiments``: the master's experiments, driven by their search methods
(docs/reference/master.md §1, §4).

It holds one search method per live experiment, feeds it trial events and carries out the
operations it returns. Trials are allocated (run) by the resource manager through
:meth:`~TrialEvents.allocate` and reported back through :meth:`~TrialEvents.allocation_exited`;
everything else arrives from the trial's own HTTP calls or from users.
"""

from __future__ import annotations

from determined.master.experiment._bookkeeping import Bookkeeping
from determined.master.experiment._custom_search import CustomSearches
from determined.master.experiment._trial_events import TrialEvents
from determined.master.experiment._unmanaged import Unmanaged


class Experiments(TrialEvents, Bookkeeping, CustomSearches, Unmanaged):
    """The master's experiments: their lifecycle (``_lifecycle``), trial events
    (``_trial_events``), bookkeeping (``_bookkeeping``), custom searches (``_custom_search``)
    and the unmanaged path (``_unmanaged``). Thread-safe: events of one experiment run one at
    a time."""
