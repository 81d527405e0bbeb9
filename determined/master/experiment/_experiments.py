"""``Experiments``: the master's experiments, driven by their search methods
(docs/reference/master.md §1, §4).

It holds one search method per live experiment, feeds it trial events and carries out the
operations it returns. Trials are allocated (run) by the resource manager through
:meth:`~TrialEvents.allocate` and reported back through :meth:`~TrialEvents.allocation_exited`;
everything else arrives from the trial's own HTTP calls or from users.

Its parts share one :class:`~_events.EventRunner` (the events, their lock, the live methods,
the subscribers); each operation below is one part's.
"""

from __future__ import annotations

from determined.master._signals import Signals
from determined.master.experiment._bookkeeping import Bookkeeping
from determined.master.experiment._custom_search import CustomSearches
from determined.master.experiment._events import EventRunner
from determined.master.experiment._lifecycle import Lifecycle
from determined.master.experiment._trial_events import TrialEvents
from determined.master.experiment._unmanaged import Unmanaged
from determined.master.store import Store


class Experiments:
    """The master's experiments: their events (``_events``), lifecycle (``_lifecycle``), trial
    events (``_trial_events``), bookkeeping (``_bookkeeping``), custom searches
    (``_custom_search``) and the unmanaged path (``_unmanaged``). Thread-safe: events of one
    experiment run one at a time."""

    def __init__(self, store: Store, signals: Signals) -> None:
        events = EventRunner(store, signals)
        self.subscribe = events.subscribe
        self.on_state_change = events.on_state_change

        lifecycle = Lifecycle(events)
        self.create = lifecycle.create
        self.set_state = lifecycle.set_state
        self.stop = lifecycle.stop
        self.kill_trial = lifecycle.kill_trial
        self.continue_trial = lifecycle.continue_trial

        trials = TrialEvents(events)
        self.current_operation = trials.current_operation
        self.complete_operation = trials.complete_operation
        self.validation_reported = trials.validation_reported
        self.report_progress = trials.report_progress
        self.early_exit = trials.early_exit
        self.allocate = trials.allocate
        self.preempt = trials.preempt
        self.allocation_exited = trials.allocation_exited

        books = Bookkeeping(events)
        self.set_archived = books.set_archived
        self.patch = books.patch
        self.delete = books.delete
        self.check_deletable = books.check_deletable

        custom = CustomSearches(events)
        self.searcher_events = custom.searcher_events
        self.post_searcher_operations = custom.post_searcher_operations

        unmanaged = Unmanaged(events)
        self.create_unmanaged = unmanaged.create_unmanaged
        self.create_unmanaged_trial = unmanaged.create_unmanaged_trial
        self.start_unmanaged_trial = unmanaged.start_unmanaged_trial
        self.report_unmanaged_state = unmanaged.report_unmanaged_state
        self.mark_lost_unmanaged_trials = unmanaged.mark_lost_unmanaged_trials
