"""``determined.transformers``: run a Hugging Face ``Trainer`` as a Determined trial with
:class:`DetCallback` (the ``[transformers]`` extra). See docs/transformers.md."""

from determined.transformers._callback import DetCallback

__all__ = ["DetCallback"]
