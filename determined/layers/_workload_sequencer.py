"""The workload sequencer, built on the Core API.

For each searcher operation (absolute length, converted to batches):

    while the operation's length is not reached:
        RUN_STEP of min(batches to the next validation, to the next checkpoint,
                        to the end of the operation, scheduling_unit) batches
        COMPUTE_VALIDATION_METRICS if min_validation_period is due
        CHECKPOINT_MODEL if min_checkpoint_period is due
    CHECKPOINT_MODEL unless the last one is current
    COMPUTE_VALIDATION_METRICS unless the last one is current (it completes the operation)

A validation that is the best so far (``checkpoint_policy: best``) or any validation
(``all``) is followed by a checkpoint. After every workload the sequencer stops when the
controller answered ``stop_requested`` or the master asks for preemption; stopping checkpoints
first unless the last checkpoint is current. An ``InvalidHP`` answer reports an early exit.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Generator
from typing import Any

from determined import core, workload
from determined._env_context import EnvContext
from determined.tensorboard._writer import is_numerical_scalar

logger = logging.getLogger("determined")

WorkloadStreamElem = tuple[workload.Workload, workload.ResponseFunc]
WorkloadGenerator = Generator[WorkloadStreamElem, None, None]


def yield_and_await_response(
    wkld: workload.Workload,
) -> Generator[WorkloadStreamElem, None, workload.Response]:
    """Yield ``wkld`` with a ``respond`` closure and return what the consumer passed to it.
    The consumer must respond before asking for the next workload."""
    answers: list[workload.Response] = []
    yield wkld, answers.append
    if len(answers) != 1:
        raise RuntimeError(
            f"the trial controller must call the response function once per workload; it "
            f"called it {len(answers)} times for {wkld}"
        )
    return answers[0]


class ShouldExit(Exception):
    """Ends the sequence from inside a step; the exit checkpoint follows unless skipped."""

    def __init__(self, skip_exit_checkpoint: bool = False) -> None:
        super().__init__()
        self.skip_exit_checkpoint = skip_exit_checkpoint


class WorkloadSequencer(workload.Source):
    """Produces the workload stream of one trial on the chief (see the module docstring).

    Its progress (``get_state()``, a small dict) belongs in the trial's checkpoints; a resumed
    run passes it back with ``load_state()``.
    """

    class SavableState:
        def __init__(
            self,
            trial_id: int,
            last_ckpt: int = 0,
            steps_completed: int = 0,
            step_id: int = 0,
            last_val: int = 0,
        ) -> None:
            self.trial_id = trial_id  # another trial's state (a continued trial) is ignored
            self.last_ckpt = last_ckpt
            self.steps_completed = steps_completed
            self.step_id = step_id
            self.last_val = last_val

    def __init__(self, core_context: core.Context, env: EnvContext, global_batch_size: int) -> None:
        self.core_context = core_context
        self.env = env
        self._trial_id = int(env.det_trial_id or 0)
        self._exp_id = int(env.det_experiment_id or 0)
        config = env.experiment_config

        unit = core_context.searcher.get_configured_units()
        if unit is None:
            logger.warning(
                "searcher.max_length has no unit; the legacy trial loop needs one and assumes "
                "epochs (write e.g. max_length: {batches: 100})"
            )
            unit = core.Unit.EPOCHS
        self._unit = unit
        self.global_batch_size = global_batch_size
        self.records_per_epoch = config.get_records_per_epoch()
        for key in ("min_validation_period", "min_checkpoint_period"):
            if (config.get(key) or {}).get("epochs") is not None and not self.records_per_epoch:
                raise ValueError(f"{key} in epochs needs records_per_epoch in the config")

        self.want_initial_val = bool(config.get("perform_initial_validation", False))
        self.ckpt_policy = config.get("checkpoint_policy") or "best"
        self.smaller_is_better = bool((config.get("searcher") or {}).get("smaller_is_better", True))
        self.searcher_metric = (config.get("searcher") or {}).get("metric")
        self.val_from_previous_run = core_context.train._get_last_validation()

        # A resumed run starts where its checkpoint left off even if the trial code does not
        # save and load this state (0.37 restarted the count at 0 then).
        done = int(env.steps_completed or 0)
        last_val = done if self.val_from_previous_run == done else 0
        self.state = self.SavableState(
            self._trial_id, last_ckpt=done, steps_completed=done, last_val=last_val
        )

        self.min_val_period_batches = self._period(config.get_min_validation_period())
        self.min_ckpt_period_batches = self._period(config.get_min_checkpoint_period())

    # -- state ---------------------------------------------------------------------------

    def get_state(self) -> Any:
        return dict(vars(self.state))

    def load_state(self, state: Any) -> None:
        """Resume from a checkpoint's ``get_state()``; another trial's state is ignored."""
        if not isinstance(state, dict) or state.get("trial_id") != self._trial_id:
            return
        self.state = self.SavableState(**state)
        # The last validation may have been of this very checkpoint: the master knows it,
        # the checkpointed state does not.
        if self.state.steps_completed == self.val_from_previous_run:
            self.state.last_val = self.state.steps_completed

    # -- lengths -------------------------------------------------------------------------

    def as_batches(
        self, batches: int | None = None, records: int | None = None, epochs: int | None = None
    ) -> int:
        """A length in exactly one unit, in batches (records and epochs round down, to at
        least 1)."""
        if (batches is not None) + (records is not None) + (epochs is not None) != 1:
            raise ValueError(
                f"a length has exactly one of batches, records, epochs: batches={batches} "
                f"records={records} epochs={epochs}"
            )
        if batches is not None:
            return int(batches)
        if self.global_batch_size <= 0:
            raise ValueError(f"global_batch_size must be positive, not {self.global_batch_size}")
        if records is not None:
            return max(int(records) // self.global_batch_size, 1)
        if not self.records_per_epoch:
            raise ValueError("a length in epochs needs records_per_epoch in the config")
        assert epochs is not None
        return max(int(epochs) * self.records_per_epoch // self.global_batch_size, 1)

    def _period(self, period: dict[str, Any]) -> int:
        # Unset or 0: never (a partial config, as local runs have, may omit the key).
        batches = self.as_batches(**period) if period else 0
        return batches if batches >= 1 else sys.maxsize

    def _op_batches(self, op: core.SearcherOperation) -> int:
        key = {core.Unit.BATCHES: "batches", core.Unit.RECORDS: "records"}.get(self._unit, "epochs")
        return self.as_batches(**{key: op.length})

    def batches_until_val(self) -> int:
        return self.state.last_val + self.min_val_period_batches - self.state.steps_completed

    def batches_until_ckpt(self) -> int:
        return self.state.last_ckpt + self.min_ckpt_period_batches - self.state.steps_completed

    def batches_until_op_complete(self, op: core.SearcherOperation) -> int:
        return self._op_batches(op) - self.state.steps_completed

    def checkpoint_is_current(self) -> bool:
        return self.state.last_ckpt == self.state.steps_completed

    def validation_is_current(self) -> bool:
        return self.state.last_val == self.state.steps_completed

    # -- steps ---------------------------------------------------------------------------

    def _workload(self, kind: workload.Workload.Kind, step_id: int, batches: int) -> Any:
        return workload.Workload(
            kind, self._exp_id, self._trial_id, step_id, batches, self.state.steps_completed
        )

    def check_for_preemption(self) -> None:
        if self.core_context.preempt.should_preempt():
            raise ShouldExit()

    def _invalid_hp(self, response: workload.Response) -> bool:
        if isinstance(response, workload.InvalidHP):
            self.core_context.train.report_early_exit(core.EarlyExitReason.INVALID_HP)
            return True
        return False

    def train(self, num_batches: int, op: core.SearcherOperation) -> WorkloadGenerator:
        self.core_context.train.set_status("training")
        wkld = self._workload(workload.Workload.Kind.RUN_STEP, self.state.step_id + 1, num_batches)
        response = yield from yield_and_await_response(wkld)
        if self._invalid_hp(response):
            raise ShouldExit()
        assert isinstance(response, dict)
        metrics = response.get("metrics") or {}
        self.state.steps_completed += num_batches
        self.state.step_id += 1
        self.core_context.train.report_training_metrics(
            steps_completed=self.state.steps_completed,
            metrics=metrics.get("avg_metrics") or {},
            batch_metrics=metrics.get("batch_metrics") or [],
        )
        # Progress in the searcher's unit.
        done = self.state.steps_completed
        if self._unit == core.Unit.RECORDS:
            op.report_progress(done * self.global_batch_size)
        elif self._unit == core.Unit.EPOCHS:
            op.report_progress(done / self.as_batches(epochs=1))
        else:
            op.report_progress(done)
        if response.get("stop_requested"):
            raise ShouldExit()
        self.check_for_preemption()

    def _is_best(self, value: float, before: float | None) -> bool:
        if before is None:
            return True
        return value < before if self.smaller_is_better else value > before

    def validate(self, op: core.SearcherOperation | None) -> WorkloadGenerator:
        self.core_context.train.set_status("validating")
        kind = workload.Workload.Kind.COMPUTE_VALIDATION_METRICS
        response = yield from yield_and_await_response(self._workload(kind, self.state.step_id, 0))
        if self._invalid_hp(response):
            raise ShouldExit()
        assert isinstance(response, dict)
        metrics = (response.get("metrics") or {}).get("validation_metrics")
        if not isinstance(metrics, dict):
            raise RuntimeError(
                "a validation response must be {'metrics': {'validation_metrics': {...}}}, "
                f"not {response!r}"
            )
        name = self.searcher_metric
        if name not in metrics:
            raise RuntimeError(
                f"the searcher's metric {name!r} (searcher.metric) is not among the validation "
                f"metrics the trial returned: {sorted(metrics)}; return it or change the config"
            )
        value = metrics[name]
        if not is_numerical_scalar(value):
            raise RuntimeError(f"the searcher's metric {name!r} must be a number, not {value!r}")

        # The searcher hears first: a crash between the two reports then repeats nothing.
        if op is not None and self.batches_until_op_complete(op) < 1:
            op.report_completed(value)
        best_before = None
        if self.ckpt_policy == "best" and not self.checkpoint_is_current():
            best_before = self.core_context.train.get_experiment_best_validation()
        self.state.last_val = self.state.steps_completed
        self.core_context.train.report_validation_metrics(
            steps_completed=self.state.steps_completed, metrics=metrics
        )
        if response.get("stop_requested"):
            raise ShouldExit()
        if not self.checkpoint_is_current() and (
            self.ckpt_policy == "all"
            or (self.ckpt_policy == "best" and self._is_best(value, best_before))
        ):
            yield from self.checkpoint(already_exiting=False)
        self.check_for_preemption()

    def checkpoint(self, already_exiting: bool) -> WorkloadGenerator:
        self.core_context.train.set_status("checkpointing")
        # Before the yield: the controller saves get_state() while handling the workload.
        self.state.last_ckpt = self.state.steps_completed
        kind = workload.Workload.Kind.CHECKPOINT_MODEL
        response = yield from yield_and_await_response(self._workload(kind, self.state.step_id, 0))
        if self._invalid_hp(response):
            if not already_exiting:
                raise ShouldExit(skip_exit_checkpoint=True)
            return
        if already_exiting:
            return
        if isinstance(response, dict) and response.get("stop_requested"):
            raise ShouldExit()
        self.check_for_preemption()

    def __iter__(self) -> workload.Stream:
        try:
            fresh = self.val_from_previous_run is None and self.state.steps_completed == 0
            if self.want_initial_val and fresh:
                yield from self.validate(None)
            for op in self.core_context.searcher.operations(core.SearcherMode.ChiefOnly):
                while self.batches_until_op_complete(op) > 0:
                    step = min(
                        self.batches_until_ckpt(),
                        self.batches_until_val(),
                        self.batches_until_op_complete(op),
                        self.env.experiment_config.scheduling_unit(),
                    )
                    yield from self.train(max(1, step), op)
                    # Validate, then checkpoint (0.37's order inside an operation).
                    if self.batches_until_val() < 1:
                        yield from self.validate(op)
                    if self.batches_until_ckpt() < 1:
                        yield from self.checkpoint(already_exiting=False)
                if not self.checkpoint_is_current():
                    yield from self.checkpoint(already_exiting=False)
                if not self.validation_is_current():
                    yield from self.validate(op)
                if not op._completed:
                    # Resumed after this length was trained and validated: nothing left.
                    break
        except ShouldExit as e:
            if not e.skip_exit_checkpoint and not self.checkpoint_is_current():
                yield from self.checkpoint(already_exiting=True)


def make_compatibility_workloads(
    core_context: core.Context, env: EnvContext, global_batch_size: int
) -> tuple[workload.Stream, WorkloadSequencer | None]:
    """The workload stream for this rank, and the sequencer (chief only; None on workers).

    The chief runs the sequencer and broadcasts each workload; workers repeat them and
    their responses are dropped. Every rank waits for all ranks after each workload.
    """
    dist = core_context.distributed
    wlsq = WorkloadSequencer(core_context, env, global_batch_size) if dist.get_rank() == 0 else None

    def chief(sequencer: WorkloadSequencer) -> workload.Stream:
        for wkld, respond in sequencer:
            dist.broadcast(wkld)
            yield wkld, respond
            dist.gather(None)
        dist.broadcast(None)  # workers leave their loop

    def worker() -> workload.Stream:
        while True:
            wkld = dist.broadcast(None)
            if wkld is None:
                return
            yield wkld, workload.ignore_workload_response
            dist.gather(None)

    return (chief(wlsq) if wlsq is not None else worker()), wlsq
