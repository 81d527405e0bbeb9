"""Unmanaged experiments (core_v2, 0.37's "detached mode"): a user's own ``python train.py``
registers an experiment and its trials, reports to them with the user's login token, and says
when each trial runs, completes or fails. The master never schedules them (see
``store._trials.runnable_trials``) and holds no resources for them.

External ids make a rerun idempotent: the same ``external_experiment_id`` finds the same
experiment, the same ``external_trial_id`` the same trial, which starts a new run (its
``run_id`` goes up, as a restart's does) and resumes from its latest checkpoint.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import uuid
from typing import Any

from determined.common import expconf
from determined.master._errors import FailedPrecondition, InvalidArgument, PermissionDenied
from determined.master.experiment import _log_policies as log_policies
from determined.master.experiment import _operations as act
from determined.master.experiment._events import Event, EventRunner, search_method
from determined.master.store import (
    State,
    _checkpoints,
    _experiments,
    _logs,
    _time,
    _trials,
    _unmanaged,
)

logger = logging.getLogger("determined.master")

# 0.37's: a running unmanaged trial whose process sent nothing for 5 minutes is lost. The
# reference's client sends a heartbeat every 60 s, ours too (core_v2._unmanaged.HEARTBEAT_S).
UNMANAGED_TRIAL_TIMEOUT_S = 300.0

# PATCH /trials/{id}'s trialv1State names that an unmanaged trial's process may report.
_REPORTED = {
    "STATE_ACTIVE": State.ACTIVE,
    "STATE_RUNNING": State.ACTIVE,
    "STATE_COMPLETED": State.COMPLETED,
    "STATE_ERROR": State.ERROR,
    "STATE_CANCELED": State.CANCELED,
}


@dataclasses.dataclass(frozen=True)
class TrialStart:
    """What a new run of an unmanaged trial resumes from (0.37's v1StartTrialResponse)."""

    trial_run_id: int
    steps_completed: int
    latest_checkpoint: str | None


class Unmanaged:
    """The unmanaged path of the experiment domain, on its event runner."""

    def __init__(self, events: EventRunner) -> None:
        self._events = events

    def create_unmanaged(
        self,
        typed: expconf.ExperimentConfig,
        original_config: str,
        *,
        owner_id: int,
        external_id: str | None = None,
        project_id: int = 1,
    ) -> int:
        """An ACTIVE unmanaged experiment in project ``project_id``, or the existing one with
        ``external_id`` (reopened if it had ended).

        Raises:
            PermissionDenied: the external id is taken by another user's experiment.
            InvalidArgument: a searcher section that cannot be read.
        """
        method = search_method(typed)
        if external_id is not None:
            with self._events.store.read() as conn:
                found = _unmanaged.experiment_by_external(conn, external_id)
            if found is not None:
                with self._events.event(found) as event:
                    if int(event.exp["owner_id"]) != owner_id:
                        raise PermissionDenied(
                            f"external experiment id {external_id!r} belongs to another "
                            "user's experiment; choose another external_experiment_id"
                        )
                    _reopen(event)
                return found
        with self._events.new_experiment(
            method,
            config=typed.to_json_dict(),
            original_config=original_config,
            model_definition=None,
            owner_id=owner_id,
            project_id=project_id,
        ) as event:
            exp_id = int(event.exp["id"])
            _unmanaged.mark_experiment(event.conn, exp_id, external_id)
            # The method is saved (pause, kill and restarts of the master read it back) but
            # never asked for trials: the user's process creates them.
            event.set_state(State.ACTIVE)
            _experiments.save_snapshot(event.conn, exp_id, method.snapshot())
        self._events.changed()
        return exp_id

    def create_unmanaged_trial(
        self,
        experiment_id: int,
        hparams: dict[str, Any] | None,
        *,
        external_id: str | None = None,
    ) -> int:
        """A new trial of the unmanaged experiment, or its trial with ``external_id``.

        Raises:
            NotFound: no such experiment.
            FailedPrecondition: the experiment is not unmanaged, or is stopping.
        """
        with self._events.event(experiment_id) as event:
            _require_unmanaged(event)
            if external_id is not None:
                found = _unmanaged.trial_by_external(event.conn, experiment_id, external_id)
                if found is not None:
                    return found
            _reopen(event)
            request_id = uuid.uuid4().hex
            trial_id = _trials.insert_trial(
                event.conn,
                experiment_id=experiment_id,
                request_id=request_id,
                hparams=dict(hparams or {}),
                seed=0,
                state=State.ACTIVE if event.state == State.ACTIVE else State.PAUSED,
            )
            _unmanaged.add_trial(event.conn, trial_id, experiment_id, external_id)
            return trial_id

    def start_unmanaged_trial(self, trial_id: int) -> TrialStart:
        """A new run of the trial: ``run_id`` goes up (reports of an older run are refused and
        its metrics past the resume point are archived, as for a restart); the trial and its
        experiment are ACTIVE again if they had ended."""
        with self._events.trial_event(trial_id) as (event, trial):
            _require_unmanaged(event)
            _reopen(event)
            run_id = int(trial["run_id"]) + 1
            _unmanaged.touch_trial(event.conn, trial_id)
            values: dict[str, Any] = {"run_id": run_id}
            if State(trial["state"]).is_terminal:
                values.update(state=State.ACTIVE, end_time=None)
            _trials.update_trial(event.conn, trial_id, **values)
            latest = _checkpoints.latest_completed(event.conn, trial_id)
            return TrialStart(
                trial_run_id=run_id,
                steps_completed=int(latest["steps_completed"]) if latest else 0,
                latest_checkpoint=str(latest["uuid"]) if latest else None,
            )

    def report_unmanaged_state(self, trial_id: int, state: str | None) -> None:
        """The trial's process says it lives (``state`` None: a heartbeat), runs, completed
        or failed. The experiment ends when its last live trial does. A trial a user already
        ended (killed) stays as it is.

        Raises:
            InvalidArgument: a state a process cannot report.
            FailedPrecondition: the trial is not of an unmanaged experiment.
        """
        new = None if state is None else _REPORTED.get(state)
        if state is not None and new is None:
            raise InvalidArgument(
                f"state {state!r} cannot be reported for an unmanaged trial; use one of "
                f"{', '.join(_REPORTED)}"
            )
        with self._events.trial_event(trial_id) as (event, trial):
            _require_unmanaged(event)
            _unmanaged.touch_trial(event.conn, trial_id)
            if new is None:
                return
            old = State(trial["state"])
            if old.is_terminal or event.state.is_terminal or event.state.is_stopping:
                return
            if new == State.ACTIVE:
                _trials.update_trial(event.conn, trial_id, runner_state="running")
                return
            act.end_trial(event, trial, new)

    def mark_lost_unmanaged_trials(self, timeout_s: float) -> list[int]:
        """Running unmanaged trials whose process has said nothing for ``timeout_s`` are
        ERROR (0.37's lost trials), ended when it last spoke; their experiment ends when its
        last trial does. A line in the trial's log says why. Returns the trials marked."""
        since = _time.now() - datetime.timedelta(seconds=timeout_s)
        with self._events.store.read() as conn:
            silent = _unmanaged.silent_trials(conn, since)
        marked = []
        for trial_id in silent:
            with self._events.trial_event(trial_id) as (event, trial):
                last = _unmanaged.last_activity(event.conn, trial_id)
                # Checked again under the lock: a heartbeat may have come in the meantime.
                if trial["state"] != State.ACTIVE.value or last is None or last >= since:
                    continue
                act.end_trial(event, trial, State.ERROR)
                _trials.update_trial(event.conn, trial_id, end_time=last)
                like = {"task_id": str(trial["task_id"])}
                text = (
                    f"trial {trial_id} is lost: its process has sent nothing since "
                    f"{_time.rfc3339(last)} (more than {timeout_s:g} s; a live one sends a "
                    "heartbeat every minute), so it is marked ERROR. Run the script again to "
                    "resume it from its latest checkpoint."
                )
                _logs.append(event.conn, [log_policies.master_line(like, text)])
                marked.append(trial_id)
        if marked:
            logger.warning("unmanaged trials lost (no heartbeat): %s", marked)
        return marked


def _require_unmanaged(event: Event) -> None:
    if not event.unmanaged:
        raise FailedPrecondition(
            f"experiment {event.exp['id']} is not unmanaged: its trials come from its searcher "
            "and report with their allocation's token"
        )


def _reopen(event: Event) -> None:
    """An ended unmanaged experiment runs again (a rerun of the user's script)."""
    if event.state.is_stopping:
        raise FailedPrecondition(
            f"experiment {event.exp['id']} is {event.state.value}; wait until it has stopped"
        )
    if event.state.is_terminal:
        event.exp["end_time"] = None
        event.exp["state"] = State.ACTIVE.value
        _experiments.update_experiment(
            event.conn, int(event.exp["id"]), state=State.ACTIVE, end_time=None
        )
        event.changed()


__all__ = ["UNMANAGED_TRIAL_TIMEOUT_S", "TrialStart", "Unmanaged"]
