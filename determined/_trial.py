"""Names that user trial code raises or subclasses."""

from __future__ import annotations


class InvalidHP(Exception):
    """Raise from trial code when the sampled hyperparameters cannot work (say, out of memory).

    The trial then reports an early exit with reason INVALID_HP and ends with exit code 0, so the
    master does not restart it; random and ASHA searches replace it with a new trial.
    """

    def __init__(self, msg: str = "...") -> None:
        if not isinstance(msg, str):
            raise TypeError(f"InvalidHP takes a str message, not {type(msg).__name__}: {msg!r}")
        super().__init__(msg)


class LegacyTrial:
    """The base of trial classes that the harness runs from a ``module:Class`` entrypoint
    (``determined.pytorch.PyTorchTrial`` is one). The harness refuses any other class."""
