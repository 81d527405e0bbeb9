"""``PyTorchCallback``: hooks into the training loop.

Order (docs/pytorch.md): ``on_trial_startup``; ``on_checkpoint_load_start`` and
``load_state_dict`` on resume; ``on_training_start``; per epoch ``on_training_epoch_start`` /
``on_training_epoch_end``; ``on_training_workload_end`` at every reporting boundary; per
validation ``on_validation_start``, ``on_validation_epoch_start``, ``on_validation_epoch_end``,
``on_validation_end``; per checkpoint (chief) ``state_dict``, ``on_checkpoint_save_start``,
``on_checkpoint_end``, ``on_checkpoint_write_end`` and (all ranks) ``on_checkpoint_upload_end``;
``on_trial_shutdown`` in reverse order, also on error.
"""

from __future__ import annotations

from typing import Any


class PyTorchCallback:
    """Subclass and override any hook; return it from ``PyTorchTrial.build_callbacks()`` under
    a name, which keys its ``state_dict()`` in checkpoints. Hooks run on every rank unless
    noted."""

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        """Before the data loaders are built. ``first_batch_idx`` is steps_completed."""

    def on_trial_shutdown(self) -> None:
        """When the trial ends, in reverse registration order, even on error."""

    def on_checkpoint_load_start(self, checkpoint: dict[str, Any]) -> None:
        """With the loaded ``state_dict.pth`` contents, before anything is restored."""

    def load_state_dict(self, state_dict: Any) -> None:
        """Restore what :meth:`state_dict` returned."""

    def state_dict(self) -> Any:
        """State to save in checkpoints (chief only)."""
        return {}

    def on_training_start(self) -> None:
        """After any checkpoint is loaded, before the first batch."""

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        """Before the first batch of each epoch."""

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        """After the last batch of each epoch."""

    def on_training_workload_end(
        self, avg_metrics: dict[str, Any], batch_metrics: list[dict[str, Any]]
    ) -> None:
        """After training metrics are reported at a boundary (same dicts on every rank)."""

    def on_validation_start(self) -> None:
        """Before validation; models are in eval mode."""

    def on_validation_epoch_start(self) -> None:
        """Before the first validation batch (``evaluate_batch`` trials only)."""

    def on_validation_epoch_end(self, outputs: list[Any]) -> None:
        """With this rank's per-batch validation dicts (``evaluate_batch`` trials only)."""

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        """With the reduced validation metrics (on every rank when this hook is overridden)."""

    def on_checkpoint_save_start(self, checkpoint: dict[str, Any]) -> None:
        """With the dict about to be saved as ``state_dict.pth``; may mutate it (chief)."""

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        """Deprecated alias of :meth:`on_checkpoint_write_end` (chief)."""

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        """After the checkpoint files are written, before they are committed (chief)."""

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        """After the checkpoint is committed, with its storage id (every rank)."""
