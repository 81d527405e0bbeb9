"""A minimal legacy TrialController: linear regression by SGD in numpy.

The 0.37 legacy Trial API in three classes:

* ``LinearTrialContext`` (a ``det.TrialContext``) adds batch sizes;
* ``LinearController`` (a ``det.TrialController``) is the training loop: it reads workloads
  from ``determined.layers`` (train N batches / validate / checkpoint) and answers each;
* ``LinearTrial`` (a ``det.LegacyTrial``) names the two and holds the model's settings.

The experiment config's ``entrypoint: model_def:LinearTrial`` is all the harness needs.
"""

from __future__ import annotations

import json
import logging
import pathlib
from typing import Any

import numpy as np

import determined as det
from determined import layers, util, workload

logger = logging.getLogger("linear")

FEATURES = 8
TRUE_W = np.linspace(-1.0, 1.0, FEATURES)


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES))
    return x, x @ TRUE_W + 0.1 * rng.normal(size=n)


class LinearTrialContext(det.TrialContext):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.per_slot_batch_size, self.global_batch_size = util.calculate_batch_sizes(
            self.get_hparams(), self.env.experiment_config.slots_per_trial(), "LinearTrial"
        )


class LinearController(det.TrialController):
    def __init__(self, trial: LinearTrial, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trial = trial
        self.lr = float(self.context.get_hparam("lr"))
        self.batch_size = self.context.per_slot_batch_size
        self.train_x, self.train_y = make_data(4096, seed=self.env.trial_seed)
        self.val_x, self.val_y = make_data(512, seed=12345)
        self.w = np.zeros(FEATURES)
        self.batches_trained = 0
        # On a cluster the workloads come from the searcher; local test mode passes its own.
        self.sequencer = None
        if self.workloads is None:
            self.workloads, self.sequencer = layers.make_compatibility_workloads(
                self.context._core, self.env, self.context.global_batch_size
            )
        if self.env.latest_checkpoint is not None:
            with self.context._core.checkpoint.restore_path(self.env.latest_checkpoint) as path:
                self.load(pathlib.Path(path))

    @classmethod
    def pre_execute_hook(cls, env: det.EnvContext, distributed_backend: Any) -> None:
        np.random.seed(env.trial_seed)  # before any user code: reproducible runs

    @classmethod
    def from_trial(cls, trial_inst: Any, *args: Any, **kwargs: Any) -> LinearController:
        return cls(trial_inst, *args, **kwargs)

    def run(self) -> None:
        for w, respond in self.workloads:
            if w.kind == workload.Workload.Kind.RUN_STEP:
                respond(self.train(w.num_batches))
            elif w.kind == workload.Workload.Kind.COMPUTE_VALIDATION_METRICS:
                respond(self.validate())
            elif w.kind == workload.Workload.Kind.CHECKPOINT_MODEL:
                respond(self.checkpoint())
            else:
                raise ValueError(f"unknown workload {w}")

    def train(self, num_batches: int) -> dict[str, Any]:
        batch_metrics = []
        for _ in range(num_batches):
            start = (self.batches_trained * self.batch_size) % len(self.train_x)
            x = self.train_x[start : start + self.batch_size]
            y = self.train_y[start : start + self.batch_size]
            err = x @ self.w - y
            self.w -= self.lr * 2 * x.T @ err / len(x)
            self.batches_trained += 1
            batch_metrics.append({"loss": float(np.mean(err**2))})
        return {
            "metrics": det.util.make_metrics(num_batches * self.batch_size, batch_metrics),
            "stop_requested": self.context.get_stop_requested(),
        }

    def validate(self) -> dict[str, Any]:
        loss = float(np.mean((self.val_x @ self.w - self.val_y) ** 2))
        return {"metrics": {"validation_metrics": {"validation_loss": loss}}}

    def checkpoint(self) -> dict[str, Any]:
        if not self.is_chief:
            return {}
        metadata = {"steps_completed": self.batches_trained}
        with self.context._core.checkpoint.store_path(metadata) as (path, storage_id):
            np.save(path / "w.npy", self.w)
            state = {"batches_trained": self.batches_trained}
            if self.sequencer is not None:
                state["sequencer"] = self.sequencer.get_state()
            (path / "state.json").write_text(json.dumps(state))
        logger.info(f"saved checkpoint {storage_id} at batch {self.batches_trained}")
        return {"uuid": storage_id}

    def load(self, path: pathlib.Path) -> None:
        self.w = np.load(path / "w.npy")
        state = json.loads((path / "state.json").read_text())
        self.batches_trained = state["batches_trained"]
        if self.sequencer is not None and "sequencer" in state:
            self.sequencer.load_state(state["sequencer"])
        logger.info(f"restored the model at batch {self.batches_trained}")


class LinearTrial(det.LegacyTrial):
    trial_context_class = LinearTrialContext
    trial_controller_class = LinearController

    def __init__(self, context: LinearTrialContext) -> None:
        self.context = context
