"""``DetCallback``: a Hugging Face ``Trainer`` callback that makes a Trainer run a Determined
trial (the ``[transformers]`` extra). See docs/transformers.md."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import transformers
from transformers import trainer_utils

import determined as det

logger = logging.getLogger("determined.transformers")

EVAL = "eval_"
TEST = "test_"
TRAIN = "train_"
USER_DATA_FILE = "my_data.json"


def get_metric_type(d: dict[str, Any]) -> str:
    """The group of a Trainer log: decided by its first key (``eval_...``, ``test_...``,
    anything else is training), as in 0.37."""
    for key in d:
        if key.startswith(EVAL):
            return EVAL
        if key.startswith(TEST):
            return TEST
        return TRAIN
    return TRAIN


def get_ds_config_path_from_args(args: list[str]) -> str | None:
    """The value after ``--deepspeed`` in a command line, or None."""
    for i, arg in enumerate(args[:-1]):
        if arg == "--deepspeed":
            return args[i + 1]
    return None


def _searcher_unit(searcher: dict[str, Any], first_op_length: int) -> tuple[str, float]:
    """``(unit, max length)`` of the experiment's searcher: a custom searcher (and a config
    without max_length) counts batches up to its first operation."""
    max_length = searcher.get("max_length")
    if searcher.get("name") == "custom" or not max_length:
        return "batches", first_op_length
    if isinstance(max_length, dict):
        unit, length = next(iter(max_length.items()))
        return str(unit), length
    return "batches", max_length


class DetCallback(transformers.TrainerCallback):
    """Reports a ``Trainer``'s metrics and checkpoints to Determined and follows its searcher
    and preemption. Build it on every rank after ``core.init()`` and before
    ``trainer.train()``, then ``trainer.add_callback(det_callback)``.

    - Construction downloads the trial's latest checkpoint into ``args.output_dir`` and sets
      ``args.resume_from_checkpoint`` (unless ``args.overwrite_output_dir``); pass it to
      ``trainer.train(resume_from_checkpoint=...)``.
    - Logs become training or validation metrics (``eval_*`` logs are validation), reported by
      the chief at ``state.global_step``; ``filter_metrics`` keeps the names that contain one
      of its strings.
    - Each save of the Trainer is uploaded as one Determined checkpoint (every rank's files),
      with ``user_data`` written into it as ``my_data.json``.
    - Searcher lengths are the Trainer's steps (``max_length.batches`` must equal
      ``--max_steps``) or epochs (``max_length.epochs`` equals ``--num_train_epochs``); at an
      operation's end it logs, evaluates and saves, then reports the searcher metric.
    - Preemption (pause, a higher-priority trial) makes the Trainer save and stop at its next
      log.
    """

    def __init__(
        self,
        core_context: det.core.Context,
        args: transformers.TrainingArguments,
        filter_metrics: list[str] | None = None,
        user_data: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.core_context = core_context
        self.filter_metrics = filter_metrics
        self.user_data = user_data
        info = det.get_cluster_info()
        if info is None or info.trial is None:
            raise AssertionError(
                "DetCallback runs in a trial a Determined master started (no cluster info "
                "here): submit the script with `det experiment create`"
            )
        self.load_last_checkpoint(args)
        self.last_metrics: dict[str, Any] = {"train_step": -1, "eval_step": -1}
        self.searcher_ops = self.core_context.searcher.operations()
        self.current_op = next(self.searcher_ops)
        self.updating_searcher = False
        searcher = dict(info.trial._config.get("searcher") or {})
        self.searcher_metric = searcher.get("metric")
        self.searcher_unit, self.searcher_max_length = _searcher_unit(
            searcher, self.current_op.length
        )
        if searcher.get("name") != "custom":
            self._check_searcher_compatibility(args)

    # ---- metrics ------------------------------------------------------------------------------

    def on_log(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if logs is None:
            logger.warning("on_log called without logs")
            return
        metrics, metric_type = self._get_metrics(logs)
        step = state.global_step
        if metric_type == TRAIN:
            # The Trainer's closing summary comes at the step of the last training log.
            if self.last_metrics["train_step"] != step:
                if state.is_world_process_zero:
                    self.core_context.train.report_training_metrics(
                        steps_completed=step, metrics=dict(metrics)
                    )
                metrics["train_step"] = step
        elif metric_type == EVAL:
            # An evaluation after training comes at the step of the last one during it.
            if self.last_metrics["eval_step"] != step:
                if state.is_world_process_zero:
                    self.core_context.train.report_validation_metrics(
                        steps_completed=step, metrics=dict(metrics)
                    )
                metrics["eval_step"] = step
        else:
            logger.warning(f"metrics of type {metric_type!r} are not reported: {sorted(logs)}")
        self.last_metrics.update(metrics)
        if self.updating_searcher:
            self._update_searcher(state, control)
        elif self.core_context.preempt.should_preempt():
            control.should_training_stop = True
            control.should_save = True

    def _get_metrics(self, logs: dict[str, Any]) -> tuple[dict[str, Any], str]:
        metric_type = get_metric_type(logs)
        if not self.filter_metrics:
            return dict(logs), metric_type
        kept = {k: v for k, v in logs.items() if any(f in k for f in self.filter_metrics)}
        return kept, metric_type

    # ---- checkpoints ------------------------------------------------------------------------

    def on_save(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        **kwargs: Any,
    ) -> None:
        info = det.get_cluster_info()
        assert info is not None and info.trial is not None  # checked in __init__
        saved = os.path.join(str(args.output_dir), f"checkpoint-{state.global_step}")
        if state.is_world_process_zero and self.user_data is not None:
            self._on_save_user_data(saved)
        metadata = {"steps_completed": state.global_step, "trial_id": info.trial.trial_id}
        prefixes = (f"checkpoint-{state.global_step}/", "runs/")

        def selector(path: str) -> bool:
            return path.startswith(prefixes)

        # Every rank adds its files (DeepSpeed writes one shard per rank).
        self.core_context.checkpoint.upload(
            args.output_dir, metadata=metadata, shard=True, selector=selector
        )

    def _on_save_user_data(self, save_path: str) -> None:
        """Write ``user_data`` into the Trainer's checkpoint directory, so it is stored with it."""
        os.makedirs(save_path, exist_ok=True)
        with open(os.path.join(save_path, USER_DATA_FILE), "w") as f:
            json.dump(self.user_data, f)

    def load_last_checkpoint(self, args: transformers.TrainingArguments) -> None:
        """Download the trial's latest checkpoint into ``args.output_dir`` and point
        ``args.resume_from_checkpoint`` at the newest ``checkpoint-*`` in it (a collective)."""
        info = det.get_cluster_info()
        latest = info.latest_checkpoint if info is not None else None
        if latest is None:
            return
        if getattr(args, "overwrite_output_dir", False):
            logger.info("overwrite_output_dir=True: not resuming from the latest checkpoint")
            return
        # Every rank needs every shard to resume DeepSpeed, so nothing is selected.
        self.core_context.checkpoint.download(latest, str(args.output_dir))
        args.resume_from_checkpoint = trainer_utils.get_last_checkpoint(args.output_dir)
        logger.info(f"Latest checkpoint downloaded to {args.resume_from_checkpoint}.")

    # ---- searcher ---------------------------------------------------------------------------

    def on_step_end(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        **kwargs: Any,
    ) -> None:
        # state.epoch is set only while training.
        if not state.epoch or self.searcher_unit != "batches":
            return
        if state.is_world_process_zero:
            self.current_op.report_progress(state.global_step)
        if state.global_step >= self.current_op.length:
            logger.info(f"searcher operation of {self.current_op.length} steps reached")
            self._update_searcher(state, control)

    def on_epoch_end(
        self,
        args: transformers.TrainingArguments,
        state: transformers.TrainerState,
        control: transformers.TrainerControl,
        **kwargs: Any,
    ) -> None:
        if not state.epoch or self.searcher_unit != "epochs":
            return
        if state.is_world_process_zero:
            self.current_op.report_progress(state.epoch)
        if state.epoch >= self.current_op.length:
            logger.info(f"searcher operation of {self.current_op.length} epochs reached")
            self._update_searcher(state, control)

    def _update_searcher(
        self, state: transformers.TrainerState, control: transformers.TrainerControl
    ) -> None:
        if not self._metrics_reported(state.global_step):
            self._wait_for_metrics(control)
            return
        if state.is_world_process_zero:
            self.current_op.report_completed(self._searcher_value(state))
        self.updating_searcher = False
        try:
            self.current_op = next(self.searcher_ops)
        except StopIteration:
            control.should_training_stop = True

    def _searcher_value(self, state: transformers.TrainerState) -> Any:
        if self.searcher_metric in self.last_metrics:
            value = self.last_metrics[self.searcher_metric]
            logger.info(f"Metric reported to searcher: {value}")
            return value
        logger.warning(
            f"searcher.metric {self.searcher_metric!r} is none of the logged metrics "
            f"{sorted(self.last_metrics)}: reporting the Trainer's best_metric "
            f"({state.best_metric}) instead. Log it (--logging_strategy, --eval_strategy) or "
            "change searcher.metric"
        )
        return state.best_metric

    def _metrics_reported(self, step: int) -> bool:
        return self.last_metrics["eval_step"] == step and self.last_metrics["train_step"] == step

    def _wait_for_metrics(self, control: transformers.TrainerControl) -> None:
        # The Trainer logs, evaluates and saves after this step; on_log completes the op.
        control.should_log = True
        control.should_evaluate = True
        control.should_save = True
        self.updating_searcher = True

    def _check_searcher_compatibility(self, args: transformers.TrainingArguments) -> None:
        if self.searcher_unit == "batches":
            if args.max_steps == -1:
                self._raise_config_mismatch("epochs", args.num_train_epochs)
            elif args.max_steps != self.searcher_max_length:
                self._raise_config_mismatch("batches", args.max_steps)
        elif self.searcher_unit == "epochs":
            if args.max_steps != -1:
                self._raise_config_mismatch("batches", args.max_steps)
            elif args.num_train_epochs != self.searcher_max_length:
                self._raise_config_mismatch("epochs", args.num_train_epochs)
        else:
            raise ValueError(
                f"searcher.max_length is in {self.searcher_unit}, which the HF Trainer does not "
                "count: give it in batches (with --max_steps) or epochs (--num_train_epochs)"
            )

    def _raise_config_mismatch(self, trainer_units: str, trainer_len: float) -> None:
        raise ValueError(
            f"the Trainer is set to {trainer_units}={trainer_len} but searcher.max_length is "
            f"{self.searcher_unit}={self.searcher_max_length}: make them equal (--max_steps "
            "with max_length.batches, or --num_train_epochs with max_length.epochs)"
        )
