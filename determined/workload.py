"""``determined.workload``: the units of work a legacy ``TrialController`` is handed.

A workload stream yields ``(Workload, respond)`` pairs; the controller does the work and must
call ``respond`` exactly once with a ``Response``: a metrics dict, or ``InvalidHP()`` when the
hyperparameters cannot work. ``determined.layers`` produces the stream from the searcher.

Responses the sequencer reads: training ``{"metrics": {"avg_metrics": {...}, "batch_metrics":
[...]}, "stop_requested": bool}``; validation ``{"metrics": {"validation_metrics": {...}},
"stop_requested": bool}``; checkpoint ``{...}`` (``stop_requested`` optional).
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Iterator
from typing import Any, Union

from determined.common import check


class Workload:
    """One step of work: train ``num_batches`` batches, validate, or checkpoint."""

    @enum.unique
    class Kind(enum.Enum):
        RUN_STEP = 1
        COMPUTE_VALIDATION_METRICS = 2
        CHECKPOINT_MODEL = 3

    def __init__(
        self,
        kind: Kind,
        e_id: int,
        t_id: int,
        s_id: int,
        num_batches: int,
        total_batches_processed: int,
    ) -> None:
        self.kind = kind
        self.experiment_id = e_id
        self.trial_id = t_id
        self.step_id = s_id
        self.num_batches = num_batches
        self.total_batches_processed = total_batches_processed

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash((self.kind, self.experiment_id, self.trial_id, self.step_id))

    def __repr__(self) -> str:
        batches = f" ({self.num_batches} Batches)" if self.kind == Workload.Kind.RUN_STEP else ""
        ids = f"({self.experiment_id},{self.trial_id},{self.step_id})"
        return f"<{self.kind.name}{batches}: {ids}>"

    def __json__(self) -> dict[str, Any]:
        return {**self.__dict__, "kind": self.kind.name}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Workload:
        """Inverse of ``__json__`` (``kind`` by name)."""
        check.check_in(data["kind"], Workload.Kind.__members__)
        return Workload(
            Workload.Kind[data["kind"]],
            data["experiment_id"],
            data["trial_id"],
            data["step_id"],
            data["num_batches"],
            data["total_batches_processed"],
        )


Metrics = dict[str, Any]


class InvalidHP:
    """The response to a workload abandoned because the hyperparameters cannot work."""


Response = Union[Metrics, InvalidHP]  # noqa: UP007 (a runtime alias, as trial code imports it)
ResponseFunc = Callable[[Response], None]
Stream = Iterator[tuple[Workload, ResponseFunc]]


class Source(metaclass=abc.ABCMeta):
    """Anything that produces a workload stream."""

    @abc.abstractmethod
    def __iter__(self) -> Stream:
        """Yield ``(workload, respond)`` pairs."""


class WorkloadResponseInterceptor:
    """Send canned workloads to a controller and read back its responses (for tests)::

    def workloads():
        w = WorkloadResponseInterceptor()
        yield from w.send(train_workload(1))
        assert w.metrics_result()["metrics"]["avg_metrics"]["loss"] < 1
    """

    def __init__(self) -> None:
        self._response: Response | None = None

    def _respond(self, resp: Response) -> None:
        check.is_none(self._response, "the controller answered one workload twice")
        self._response = resp

    def send(self, workload: Workload) -> Stream:
        self._response = None
        yield workload, self._respond

    def result(self) -> Response:
        check.is_not_none(self._response, "the controller did not answer the workload")
        out, self._response = self._response, None
        assert out is not None
        return out

    def metrics_result(self) -> Metrics:
        check.is_not_none(self._response, "the controller did not answer the workload")
        check.is_instance(self._response, dict, "the controller answered InvalidHP")
        return self.result()  # type: ignore[return-value]


def ignore_workload_response(*_: Any) -> None:
    """A ``respond`` that drops the response (workers' streams use it)."""


def train_workload(
    step_id: int,
    exp_id: int = 1,
    trial_id: int = 1,
    num_batches: int = 1,
    total_batches_processed: int = 0,
) -> Workload:
    return Workload(
        Workload.Kind.RUN_STEP, exp_id, trial_id, step_id, num_batches, total_batches_processed
    )


def validation_workload(
    step_id: int = 1, exp_id: int = 1, trial_id: int = 1, total_batches_processed: int = 0
) -> Workload:
    return Workload(
        Workload.Kind.COMPUTE_VALIDATION_METRICS,
        exp_id,
        trial_id,
        step_id,
        0,
        total_batches_processed,
    )


def checkpoint_workload(
    step_id: int = 1, exp_id: int = 1, trial_id: int = 1, total_batches_processed: int = 0
) -> Workload:
    return Workload(
        Workload.Kind.CHECKPOINT_MODEL, exp_id, trial_id, step_id, 0, total_batches_processed
    )
