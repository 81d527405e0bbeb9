# Ported from Determined 0.37.0, harness/tests/experiment/utils.py
# (https://github.com/determined-ai/determined, Apache License 2.0; see NOTICE): the parts the
# DeepSpeed harness tests use. Adapted: the Core API context comes from this tree's core.init()
# without a master (0.37: core._dummy_init), GPUs are read from torch, and fresh_process_group()
# / free_port() are added so the tests can share a process with others.
"""Scaffolding of 0.37's harness tests: workload streams and trial controllers in-process."""

from __future__ import annotations

import os
import pathlib
import socket
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import torch

import determined as det
from determined import core, workload


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fresh_process_group() -> None:
    """End torch.distributed and DeepSpeed's handle on it, as in a new process."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    try:
        from deepspeed.comm import comm
        from deepspeed.utils import groups
    except ImportError:
        return
    comm.cdb = None
    # The groups DeepSpeed cached on the old process group.
    for name, value in list(vars(groups).items()):
        if name.startswith("_") and name.isupper() and isinstance(value, dict):
            value.clear()
        elif name.startswith("_") and name.isupper() and "GROUP" in name and value is not None:
            setattr(groups, name, None)


class TrainAndValidate:
    """Sends RUN_STEP and COMPUTE_VALIDATION_METRICS workloads and keeps their metrics."""

    def __init__(self, request_stop_step_id: int | None = None) -> None:
        self._training_metrics: list[dict[str, Any]] | None = None
        self._avg_training_metrics: list[dict[str, Any]] | None = None
        self._validation_metrics: list[dict[str, Any]] | None = None
        self.request_stop_step_id = request_stop_step_id
        self._steps_completed = 0

    def send(
        self,
        steps: int,
        validation_freq: int,
        initial_step_id: int = 1,
        scheduling_unit: int = 1,
        train_batch_calls: int = 1,
    ) -> workload.Stream:
        self._training_metrics = []
        self._avg_training_metrics = []
        self._validation_metrics = []
        self._steps_completed = 0
        interceptor = workload.WorkloadResponseInterceptor()
        for step_id in range(initial_step_id, initial_step_id + steps):
            stop_requested = False
            yield from interceptor.send(
                workload.train_workload(
                    step_id,
                    num_batches=scheduling_unit,
                    total_batches_processed=self._steps_completed,
                ),
            )
            metrics = interceptor.metrics_result()
            batch_metrics = metrics["metrics"]["batch_metrics"]
            assert len(batch_metrics) == scheduling_unit * train_batch_calls
            self._training_metrics.extend(batch_metrics)
            self._avg_training_metrics.append(metrics["metrics"]["avg_metrics"])
            self._steps_completed += scheduling_unit
            if metrics.get("stop_requested"):
                assert step_id == self.request_stop_step_id, (step_id, self)
                stop_requested = True
            if step_id % validation_freq == 0:
                yield from interceptor.send(
                    workload.validation_workload(
                        step_id, total_batches_processed=self._steps_completed
                    ),
                )
                validation = interceptor.metrics_result()
                self._validation_metrics.append(validation["metrics"]["validation_metrics"])
                if validation.get("stop_requested"):
                    assert step_id == self.request_stop_step_id, (step_id, self)
                    stop_requested = True
            if stop_requested:
                break
            assert step_id != self.request_stop_step_id

    def result(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        assert self._training_metrics is not None
        assert self._validation_metrics is not None
        return self._training_metrics, self._validation_metrics

    def get_steps_completed(self) -> int:
        return self._steps_completed

    def get_avg_training_metrics(self) -> list[dict[str, Any]]:
        assert self._avg_training_metrics is not None
        return self._avg_training_metrics


def make_default_exp_config(
    hparams: dict[str, Any],
    scheduling_unit: int,
    searcher_metric: str,
    checkpoint_dir: str | None = None,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "scheduling_unit": scheduling_unit,
        "resources": {"native_parallel": False, "slots_per_trial": 1},
        "hyperparameters": hparams,
        "optimizations": {
            "mixed_precision": "O0",
            "aggregation_frequency": 1,
            "gradient_compression": False,
            "average_training_metrics": True,
            "auto_tune_tensor_fusion": False,
            "tensor_fusion_threshold": 100,
            "tensor_fusion_cycle_time": 3.5,
        },
        "data_layer": {"type": "shared_fs"},
        "checkpoint_policy": "best",
        "perform_initial_validation": False,
        "checkpoint_storage": {"type": "shared_fs", "host_path": checkpoint_dir or "/tmp"},
        "searcher": {"metric": searcher_metric, "smaller_is_better": True},
        "min_checkpoint_period": {"batches": 0},
        "min_validation_period": {"batches": 0},
        "data": data or {},
    }


def make_default_env_context(
    hparams: dict[str, Any],
    experiment_config: dict[str, Any],
    trial_seed: int = 0,
    latest_checkpoint: str | None = None,
    steps_completed: int = 0,
    expose_gpus: bool = False,
) -> det.EnvContext:
    assert (latest_checkpoint is None) == (steps_completed == 0)
    gpus = [str(i) for i in range(torch.cuda.device_count())] if expose_gpus else []
    return det.EnvContext(
        experiment_config=experiment_config,
        master_url="",
        master_cert_file=None,
        master_cert_name=None,
        hparams=hparams,
        latest_checkpoint=latest_checkpoint,
        steps_completed=steps_completed,
        use_gpu=bool(gpus),
        container_gpus=gpus,
        slot_ids=[],
        debug=False,
        det_trial_id="1",
        det_experiment_id="1",
        det_agent_id="1",
        det_cluster_id="uuid-123",
        trial_seed=trial_seed,
        trial_run_id=1,
        allocation_id="",
        managed_training=True,
        test_mode=False,
        on_cluster=False,
    )


def assert_equivalent_metrics(metrics_a: dict[str, Any], metrics_b: dict[str, Any]) -> None:
    assert set(metrics_a) == set(metrics_b)
    for key, value in metrics_a.items():
        if isinstance(value, (float, np.float64)):
            assert value == pytest.approx(metrics_b[key])
        elif isinstance(value, np.ndarray):
            assert np.array_equal(value, metrics_b[key])
        else:
            assert value == metrics_b[key]


def make_trial_controller_from_trial_implementation(
    trial_class: type[det.LegacyTrial],
    hparams: dict[str, Any],
    workloads: workload.Stream | None = None,
    scheduling_unit: int = 1,
    trial_seed: int = 0,
    exp_config: dict[str, Any] | None = None,
    checkpoint_dir: str | None = None,
    latest_checkpoint: str | None = None,
    steps_completed: int = 0,
    expose_gpus: bool = False,
) -> det.TrialController:
    if not exp_config:
        searcher_metric = trial_class._searcher_metric  # type: ignore[attr-defined]
        exp_config = make_default_exp_config(
            hparams, scheduling_unit, searcher_metric, checkpoint_dir=checkpoint_dir
        )
    env = make_default_env_context(
        hparams=hparams,
        experiment_config=exp_config,
        trial_seed=trial_seed,
        latest_checkpoint=latest_checkpoint,
        steps_completed=steps_completed,
        expose_gpus=expose_gpus,
    )
    core_context = core.init(
        checkpoint_storage=checkpoint_dir or "/tmp",
        tensorboard_mode=core.TensorboardMode.MANUAL,
    )
    core_context.start()
    controller_class = trial_class.trial_controller_class
    assert controller_class is not None
    controller_class.pre_execute_hook(env, det._DistributedBackend())
    trial_context = trial_class.trial_context_class(core_context, env)
    trial_inst = trial_class(trial_context)
    return controller_class.from_trial(
        trial_inst=trial_inst, context=trial_context, env=env, workloads=workloads
    )


def reproducibility_test(
    controller_fn: Callable[[workload.Stream], det.TrialController],
    steps: int,
    validation_freq: int,
    seed: int = 123,
    scheduling_unit: int = 1,
) -> Any:
    training_metrics: dict[str, Any] = {}
    validation_metrics: dict[str, Any] = {}

    def make_workloads(tag: str) -> workload.Stream:
        trainer = TrainAndValidate()
        yield from trainer.send(steps, validation_freq, scheduling_unit=scheduling_unit)
        training_metrics[tag], validation_metrics[tag] = trainer.result()

    os.environ["DET_TRIAL_SEED"] = str(seed)
    controller_fn(make_workloads("A")).run()
    assert os.environ["DET_TRIAL_SEED"] == str(seed)
    controller_fn(make_workloads("B")).run()
    assert len(training_metrics["A"]) == len(training_metrics["B"])
    for a, b in zip(training_metrics["A"], training_metrics["B"], strict=True):
        assert_equivalent_metrics(a, b)
    assert len(validation_metrics["A"]) == len(validation_metrics["B"])
    for a, b in zip(validation_metrics["A"], validation_metrics["B"], strict=True):
        assert_equivalent_metrics(a, b)
    return (
        (training_metrics["A"], validation_metrics["A"]),
        (training_metrics["B"], validation_metrics["B"]),
    )


def checkpointing_and_restoring_test(
    make_trial_controller_fn: Callable[..., det.TrialController],
    tmp_path: pathlib.Path,
    steps: tuple[int, int] = (1, 1),
    scheduling_unit: int = 100,
) -> tuple[Sequence[dict[str, Any]], Sequence[dict[str, Any]]]:
    """Trial A trains steps[0], checkpoints, and a new controller restores it and trains
    steps[1]; trial B trains both at once: their metrics must be the same."""
    training_metrics: dict[str, list[Any]] = {"A": [], "B": []}
    validation_metrics: dict[str, list[Any]] = {"A": [], "B": []}
    checkpoint_dir = str(tmp_path.joinpath("checkpoint"))
    latest_checkpoint = None
    steps_completed = 0

    def make_workloads(steps: int, tag: str, checkpoint: bool) -> workload.Stream:
        trainer = TrainAndValidate()
        yield from trainer.send(steps, validation_freq=1, scheduling_unit=scheduling_unit)
        tm, vm = trainer.result()
        training_metrics[tag] += tm
        validation_metrics[tag] += vm
        if checkpoint:
            interceptor = workload.WorkloadResponseInterceptor()
            yield from interceptor.send(workload.checkpoint_workload())
            nonlocal latest_checkpoint, steps_completed
            latest_checkpoint = interceptor.metrics_result()["uuid"]
            steps_completed = trainer.get_steps_completed()

    make_trial_controller_fn(
        make_workloads(steps[0], "A", True), checkpoint_dir=checkpoint_dir
    ).run()
    assert latest_checkpoint is not None, "make_workloads did not set the latest_checkpoint"
    make_trial_controller_fn(
        make_workloads(steps[1], "A", False),
        checkpoint_dir=checkpoint_dir,
        latest_checkpoint=latest_checkpoint,
        steps_completed=steps_completed,
    ).run()
    make_trial_controller_fn(make_workloads(steps[0] + steps[1], "B", False)).run()
    for a, b in zip(training_metrics["A"], training_metrics["B"], strict=True):
        assert_equivalent_metrics(a, b)
    for a, b in zip(validation_metrics["A"], validation_metrics["B"], strict=True):
        assert_equivalent_metrics(a, b)
    return (training_metrics["A"], training_metrics["B"])
