"""``determined.layers``: the workload sequencer that turns the searcher's operations into the
train / validate / checkpoint workloads a legacy ``det.TrialController`` consumes."""

from determined.layers._workload_sequencer import (
    ShouldExit,
    WorkloadSequencer,
    make_compatibility_workloads,
    yield_and_await_response,
)

__all__ = [
    "ShouldExit",
    "WorkloadSequencer",
    "make_compatibility_workloads",
    "yield_and_await_response",
]
