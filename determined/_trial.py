"""Names that user trial code raises or subclasses."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar

from determined._trial_context import TrialContext

if TYPE_CHECKING:
    from determined._trial_controller import TrialController


class InvalidHP(Exception):
    """Raise from trial code when the sampled hyperparameters cannot work (say, out of memory).

    The trial then reports an early exit with reason INVALID_HP and ends with exit code 0, so the
    master does not restart it; random and ASHA searches replace it with a new trial.
    """

    def __init__(self, msg: str = "...") -> None:
        if not isinstance(msg, str):
            raise TypeError(f"InvalidHP takes a str message, not {type(msg).__name__}: {msg!r}")
        super().__init__(msg)


class LegacyTrial(metaclass=abc.ABCMeta):
    """The base of trial classes that the harness runs from a ``module:Class`` entrypoint.

    ``determined.pytorch.PyTorchTrial`` is one. A class of one's own names the loop that trains
    it (``trial_controller_class``, a ``det.TrialController``) and the context class it gets
    (``trial_context_class``, a ``det.TrialContext`` by default).
    """

    trial_controller_class: ClassVar[type[TrialController] | None] = None
    trial_context_class: ClassVar[Any] = TrialContext

    @abc.abstractmethod
    def __init__(self, context: Any) -> None:
        """Build the trial from its ``context`` (keep it: the other methods need it)."""
