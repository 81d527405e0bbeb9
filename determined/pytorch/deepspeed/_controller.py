"""``DeepSpeedTrialController``: trains a ``DeepSpeedTrial`` from the legacy workload stream
(``determined.layers``: train N batches, validate, checkpoint), as 0.37 did.

One batch is ``gradient_accumulation_steps`` micro batches (the DeepSpeed config's
``train_batch_size`` across data-parallel ranks); searcher lengths count batches. Each rank
writes its engines' shards and its own state file into one Determined checkpoint
(``store_path(shard=True)``); the chief adds the sequencer's progress.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
import random
import time
from typing import Any, cast

import deepspeed
import numpy as np
import torch

import determined as det
from determined import errors, pytorch, util, workload
from determined.pytorch import _metrics, _reducer
from determined.pytorch.deepspeed import _loaders
from determined.pytorch.deepspeed._context import DeepSpeedTrialContext
from determined.pytorch.deepspeed._trial import DeepSpeedTrial

logger = logging.getLogger("determined.pytorch")

SEQUENCER_FILE = "workload_sequencer.json"


def _state_file(rank: int) -> str:
    return f"det_state_dict_rank{rank}.pth"


def _rng_state() -> dict[str, Any]:
    """Every RNG of this rank in types ``torch.load(weights_only=True)`` reads back."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "cpu_rng_state": torch.random.get_rng_state(),
        "np_rng_state": [kind, torch.from_numpy(np.asarray(keys)), pos, has_gauss, gauss],
        "random_rng_state": [py_version, list(py_state), py_gauss],
    }
    if torch.cuda.is_available() and torch.cuda.device_count():
        state["gpu_rng_state"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.random.set_rng_state(state["cpu_rng_state"])
    kind, keys, pos, has_gauss, gauss = state["np_rng_state"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    py_version, py_state, py_gauss = state["random_rng_state"]
    random.setstate((py_version, tuple(py_state), py_gauss))
    if "gpu_rng_state" in state and torch.cuda.is_available() and torch.cuda.device_count():
        torch.cuda.set_rng_state(state["gpu_rng_state"])


def _skip_cpu_shm_comm() -> None:
    """On DeepSpeed's CPU accelerator, use gloo's collectives instead of JIT-compiling the
    shared-memory ones (minutes of C++ per process whose extension cache is new, as every
    trial's is). ``DET_DEEPSPEED_CPU_SHM=1`` keeps DeepSpeed's choice."""
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    if accelerator.device_name() != "cpu" or os.environ.get("DET_DEEPSPEED_CPU_SHM") == "1":
        return
    builder = accelerator.create_op_builder("ShareMemCommBuilder")
    if builder is not None:
        deepspeed.ops.__compatible_ops__[builder.NAME] = False


class DeepSpeedTrialController(det.TrialController):
    """The loop of a ``DeepSpeedTrial`` (see the module docstring). Built by the harness with
    ``from_trial(trial_inst=, context=, env=)`` on every rank; ``run()`` returns when the
    search is done or the trial is preempted or asks to stop."""

    def __init__(
        self,
        trial_inst: det.LegacyTrial,
        context: Any,
        env: det.EnvContext,
        workloads: workload.Stream | None = None,
    ) -> None:
        super().__init__(context, env, workloads)
        if not isinstance(trial_inst, DeepSpeedTrial):
            raise TypeError(
                f"DeepSpeedTrialController trains a DeepSpeedTrial, not {type(trial_inst)}"
            )
        if not isinstance(context, DeepSpeedTrialContext):
            raise TypeError(f"a DeepSpeedTrial needs a DeepSpeedTrialContext, not {type(context)}")
        self.trial = trial_inst
        self.context: DeepSpeedTrialContext = context
        self.callbacks = self.trial.build_callbacks()
        if not self.context.models:
            raise errors.InvalidExperimentException(
                "the trial registered no model engine: call "
                "context.wrap_model_engine(engine) in the trial's __init__"
            )
        self.wlsq: Any = None
        if self.workloads is None:
            from determined import layers

            self.workloads, self.wlsq = layers.make_compatibility_workloads(
                self.context._core, self.env, self.context.models[0].train_batch_size()
            )
        self.steps_completed = self.env.steps_completed
        self.data: _loaders.Loaders | None = None

    @classmethod
    def pre_execute_hook(
        cls: type[det.TrialController],
        env: det.EnvContext,
        distributed_backend: det._DistributedBackend,
    ) -> None:
        """Start torch.distributed through DeepSpeed (unless ``DET_MANUAL_INIT_DISTRIBUTED`` is
        set: the trial then does it) and seed every RNG with the trial seed on all ranks."""
        _skip_cpu_shm_comm()
        if not os.environ.get("DET_MANUAL_INIT_DISTRIBUTED"):
            deepspeed.init_distributed(auto_mpi_discovery=False)
        random.seed(env.trial_seed)
        np.random.seed(env.trial_seed)
        torch.random.manual_seed(env.trial_seed)

    @classmethod
    def from_trial(
        cls: type[det.TrialController], *args: Any, **kwargs: Any
    ) -> det.TrialController:
        return cls(*args, **kwargs)

    # ---- the run ---------------------------------------------------------------------------

    def run(self) -> None:
        with contextlib.ExitStack() as stack:
            for callback in self.callbacks.values():
                callback.on_trial_startup(self.steps_completed, self.env.latest_checkpoint)
                stack.callback(callback.on_trial_shutdown)
            logger.info(f"model-parallel unit: {self.context._mpu}")
            self.data = _loaders.build(self.trial, self.context, self.env.steps_completed)
            # The iterator exists before the checkpoint is loaded, so that building it does not
            # draw from the restored RNG state.
            self.training_iterator = (
                iter(self.data.training) if self.data.training is not None else None
            )
            stack.callback(self._drop_iterator)
            if self.env.latest_checkpoint is not None:
                logger.info(f"Restoring trial from checkpoint {self.env.latest_checkpoint}")
                with self.context._core.checkpoint.restore_path(self.env.latest_checkpoint) as p:
                    self._load(p)
            for callback in self.callbacks.values():
                callback.on_training_start()
            if self.profiling_enabled:
                self.context._core.profiler.on()
            self._run()

    def _drop_iterator(self) -> None:
        # Worker processes of the data loader end when the iterator goes away.
        self.training_iterator = None

    def _run(self) -> None:
        assert self.workloads is not None
        for wkld, respond in self.workloads:
            try:
                response = self._handle(wkld)
            except det.InvalidHP as e:
                logger.info(f"invalid hyperparameters during {wkld.kind.name}: {e}")
                response = workload.InvalidHP()
            respond(response)
            self.context._maybe_reset_tbd_writer()
            self.upload_tb_files()

    def _handle(self, wkld: workload.Workload) -> workload.Response:
        kind = wkld.kind
        if kind == workload.Workload.Kind.RUN_STEP:
            metrics = self._train_for_step(
                wkld.step_id, wkld.num_batches, wkld.total_batches_processed
            )
            response: workload.Response = {
                "metrics": metrics,
                "stop_requested": self.context.get_stop_requested(),
            }
            shared = self.context.distributed.broadcast(metrics)
            for callback in self.callbacks.values():
                callback.on_training_workload_end(
                    avg_metrics=shared["avg_metrics"], batch_metrics=shared["batch_metrics"]
                )
            return response
        if kind == workload.Workload.Kind.COMPUTE_VALIDATION_METRICS:
            return {
                "metrics": self._compute_validation_metrics(),
                "stop_requested": self.context.get_stop_requested(),
            }
        if kind == workload.Workload.Kind.CHECKPOINT_MODEL:
            return self._checkpoint()
        raise errors.InternalException(f"unexpected workload {wkld}")

    def get_epoch_idx(self, batch_id: int) -> int:
        return batch_id // cast(int, self.context._epoch_len)

    # ---- training ----------------------------------------------------------------------------

    def _train_calls_per_batch(self) -> int:
        if self.context.use_pipeline_parallel or self.context._manual_grad_accumulation:
            return 1  # the engine (or the trial) walks the micro batches itself
        return self.context.num_micro_batches_per_slot

    def _train_for_step(
        self, step_id: int, num_batches: int, total_batches_processed: int
    ) -> dict[str, Any]:
        """Train ``num_batches`` batches from ``total_batches_processed``; the chief returns
        ``{"avg_metrics", "batch_metrics", "num_inputs"}``, workers ``{}``."""
        if step_id <= 0:
            raise errors.InternalException(f"step_id must be positive, not {step_id}")
        start_time = time.time()
        self.context.reset_reducers()
        for model in self.context.models:
            model.train()
        per_batch: list[dict[str, Any]] = []
        inputs_per_batch = (
            self.context.train_micro_batch_size_per_gpu * self.context.num_micro_batches_per_slot
        )
        start = total_batches_processed
        for batch_idx in range(start, start + num_batches):
            self.steps_completed += 1
            self._train_one_batch(batch_idx, per_batch)
        num_inputs = inputs_per_batch * num_batches * self.context._mpu.data_parallel_world_size
        return self._training_metrics(per_batch, num_inputs, num_batches, time.time() - start_time)

    def _train_one_batch(self, batch_idx: int, per_batch: list[dict[str, Any]]) -> None:
        self.context._current_batch_idx = batch_idx
        epoch = self.get_epoch_idx(batch_idx)
        if self.context.is_epoch_start():
            for callback in self.callbacks.values():
                callback.on_training_epoch_start(epoch)
        for _ in range(self._train_calls_per_batch()):
            with self.context.profiler or contextlib.nullcontext():
                metrics = self.trial.train_batch(self.training_iterator, epoch, batch_idx)
            if self.context.profiler is not None:
                self.context.profiler.step()
            if self.context._mpu.should_report_metrics:
                per_batch.append(_train_metrics_dict(metrics))
        engine = self.context.models[0]
        micro = self.context.num_micro_batches_per_slot
        if not isinstance(engine, deepspeed.PipelineEngine) and engine.micro_steps % micro:
            raise AssertionError(
                f"did not train for gradient accumulation steps: train_batch must run {micro} "
                "micro batches per batch (the DeepSpeed config's gradient_accumulation_steps)"
            )
        if self.context.is_epoch_end():
            for callback in self.callbacks.values():
                callback.on_training_epoch_end(epoch)

    def _training_metrics(
        self, per_batch: list[dict[str, Any]], num_inputs: int, num_batches: int, took: float
    ) -> dict[str, Any]:
        dist = self.context.distributed
        if dist.get_size() > 1 and self.context._average_training_metrics:
            reduced = _metrics.reduce_training(per_batch, dist.gather, True)
            per_batch = reduced[1] if reduced is not None else []
        else:
            per_batch = _metrics.to_numbers(per_batch)
        metrics = util.make_metrics(num_inputs, per_batch)
        reduced_by_reducers = self.context.reduce_metrics(for_training=True)
        metrics["avg_metrics"].update(_plain(reduced_by_reducers))
        if not self.is_chief:
            return {}
        logger.info(util.make_timing_log("trained", took, num_inputs, num_batches))
        if self.context.get_enable_tensorboard_logging():
            self._log_tb("train", metrics["avg_metrics"])
        return metrics

    # ---- validation --------------------------------------------------------------------------

    @torch.no_grad()
    def _compute_validation_metrics(self) -> dict[str, Any]:
        """Validate on every rank; the chief returns ``{"num_inputs", "validation_metrics"}``,
        workers ``{}``."""
        assert self.data is not None
        self.context.reset_reducers()
        for model in self.context.models:
            model.eval()
        start_time = time.time()
        for callback in self.callbacks.values():
            callback.on_validation_start()
            callback.on_validation_epoch_start()
        batches = self._validation_batches()
        keys = self._agree_on_keys(batches)
        for callback in self.callbacks.values():
            callback.on_validation_epoch_end(batches)
        metrics = self._reduce_validation(batches, keys)
        metrics.update(_plain(self.context.reduce_metrics(for_training=False)))
        if self.context.distributed.get_size() > 1 and any(
            util.is_overridden(c.on_validation_end, pytorch.PyTorchCallback)
            for c in self.callbacks.values()
        ):
            metrics = self.context.distributed.broadcast(metrics)
        for callback in self.callbacks.values():
            callback.on_validation_end(metrics)
        if not self.is_chief:
            return {}
        num_batches = self.data.num_validation_batches
        num_inputs = num_batches * self.data.validation_batch_size
        num_inputs *= self.context._mpu.data_parallel_world_size
        took = time.time() - start_time
        logger.info(util.make_timing_log("validated", took, num_inputs, num_batches))
        if self.context.get_enable_tensorboard_logging():
            self._log_tb("val", metrics)
        return {"num_inputs": num_inputs, "validation_metrics": metrics}

    def _validation_batches(self) -> list[dict[str, Any]]:
        assert self.data is not None
        loader = self.data.validation
        iterator = iter(loader) if loader is not None else None
        batches: list[dict[str, Any]] = []
        keys: Any = None
        for idx in range(self.data.num_validation_batches):
            out = self.trial.evaluate_batch(iterator, idx)
            if self.context._mpu.should_report_metrics:
                if not isinstance(out, dict):
                    raise errors.InvalidExperimentException(
                        "evaluate_batch must return a dictionary of string names to Tensor "
                        f"metrics, not {type(out).__name__}"
                    )
                if keys is None:
                    keys = out.keys()
                elif keys != out.keys():
                    raise errors.InvalidExperimentException(
                        "Validation metric names must match across all batches of data: got "
                        f"{sorted(keys)} and then {sorted(out)}"
                    )
                batches.append(_metrics.to_numbers([out])[0])
            if self.env.test_mode:
                break
        return batches

    def _agree_on_keys(self, batches: list[dict[str, Any]]) -> list[str]:
        """The metric names of the ranks that report (some pipeline stages do not)."""
        mine = list(batches[0]) if batches else None
        gathered = self.context.distributed.gather(mine)
        keys: list[str] | None = None
        if gathered is not None:
            keys = next((k for k in gathered if k is not None), [])
        return cast(list[str], self.context.distributed.broadcast(keys))

    def _reduce_validation(self, batches: list[dict[str, Any]], keys: list[str]) -> dict[str, Any]:
        mine = _reducer._per_rank_reduce(batches, pytorch.Reducer.AVG) if batches else {}
        gathered = self.context.distributed.gather((mine, len(batches)))
        if gathered is None:
            return {}
        out = _reducer._cross_rank_reduce(gathered, pytorch.Reducer.AVG)
        return {k: out[k] for k in keys if k in out}

    # ---- checkpoints -------------------------------------------------------------------------

    def _checkpoint(self) -> workload.Response:
        metadata = {
            "steps_completed": self.steps_completed,
            "framework": f"torch-{torch.__version__}",
            "format": "deepspeed",
        }
        with self.context._core.checkpoint.store_path(metadata, shard=True) as (path, uuid):
            self._save(path)
        for callback in self.callbacks.values():
            callback.on_checkpoint_upload_end(uuid=uuid)
        return {"uuid": uuid}

    def _save(self, path: pathlib.Path) -> None:
        dist = self.context.distributed
        if dist.get_local_rank() == 0:
            path.mkdir(parents=True, exist_ok=True)
        dist.gather_local(None)  # the directory exists before any rank writes into it
        if self.is_chief and self.wlsq is not None:
            (path / SEQUENCER_FILE).write_text(json.dumps(self.wlsq.get_state()))
        state: dict[str, Any] = {
            "rng_state": _rng_state(),
            "callbacks": {name: cb.state_dict() for name, cb in self.callbacks.items()},
        }
        for callback in self.callbacks.values():
            callback.on_checkpoint_save_start(state)
        torch.save(state, path / _state_file(dist.get_rank()))
        self.trial.save(self.context, path)
        for callback in self.callbacks.values():
            callback.on_checkpoint_end(str(path))
            callback.on_checkpoint_write_end(str(path))

    def _load(self, load_path: pathlib.Path) -> None:
        state_path = load_path / _state_file(self.context.distributed.get_rank())
        if not state_path.exists():
            raise errors.InvalidExperimentException(
                f"checkpoint {load_path} has no {state_path.name}: it was not written by a "
                "DeepSpeedTrial with this many slots"
            )
        try:
            state = torch.load(state_path, map_location="cpu", weights_only=True)
        except Exception as e:
            raise errors.InvalidExperimentException(f"cannot read {state_path}: {e}") from e
        for callback in self.callbacks.values():
            callback.on_checkpoint_load_start(state)
        self.trial.load(self.context, load_path)
        if "rng_state" in state:
            _set_rng_state(state["rng_state"])
        saved = state.get("callbacks", {})
        for name, callback in self.callbacks.items():
            if name in saved:
                callback.load_state_dict(saved[name])
            elif util.is_overridden(callback.load_state_dict, pytorch.PyTorchCallback):
                logger.warning(f"no state for callback {name!r} in the checkpoint: it starts anew")
        seq_path = load_path / SEQUENCER_FILE
        if self.wlsq is not None and seq_path.exists():
            self.wlsq.load_state(json.loads(seq_path.read_text()))

    # ---- TensorBoard ---------------------------------------------------------------------

    def on_validation_step_end(self, metrics: dict[str, Any]) -> None:
        """Write validation metrics to TensorBoard (when its logging is enabled)."""
        if self.context.get_enable_tensorboard_logging():
            self._log_tb("val", metrics)

    def _log_tb(self, group: str, metrics: dict[str, Any]) -> None:
        writer = self.context.get_tensorboard_writer()
        for name, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                writer.add_scalar(f"Determined/{group}/{name}", value, self.steps_completed)


def _train_metrics_dict(metrics: Any) -> dict[str, Any]:
    if isinstance(metrics, torch.Tensor):
        metrics = {"loss": metrics}
    if not isinstance(metrics, dict):
        raise errors.InvalidExperimentException(
            "train_batch must return a dictionary mapping string names to Tensor metrics, "
            f"got {type(metrics)}"
        )
    return {
        k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v
        for k, v in metrics.items()
    }


def _plain(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: _reducer._to_python(v) for k, v in metrics.items()}
