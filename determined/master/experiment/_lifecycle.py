"""The experiment lifecycle: create, pause and activate, cancel and kill, continue
(docs/reference/master.md §1, §4.1–§4.2, §4.4). Each is one event (``_events``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from determined.common import expconf
from determined.master import searcher
from determined.master._errors import FailedPrecondition, InvalidArgument
from determined.master.experiment import _operations as act
from determined.master.experiment._events import EventRunner, search_method
from determined.master.experiment._states import trial_escalation
from determined.master.store import ExperimentRow, State, TrialRow, _experiments, _trials


class Lifecycle:
    """The lifecycle of the master's experiments, on their event runner."""

    def __init__(self, events: EventRunner) -> None:
        self._events = events

    def create(
        self,
        typed: expconf.ExperimentConfig,
        original_config: str,
        *,
        owner_id: int,
        model_definition: bytes | None = None,
        activate: bool = True,
        project_id: int = 1,
    ) -> int:
        """Store a new experiment (PAUSED, its trials created) in project ``project_id`` and
        activate it unless asked not to. Its config is stored as JSON (what the API and trials
        read). Raises InvalidArgument for a searcher section that cannot run."""
        method = search_method(typed)
        config = typed.to_json_dict()
        with self._events.new_experiment(
            method,
            config=config,
            original_config=original_config,
            model_definition=model_definition,
            owner_id=owner_id,
            project_id=project_id,
        ) as event:
            # A warm-start source that does not exist: nothing is created.
            act.warm_start_of(event.conn, config)
            act.apply(event, method.initial_operations())
            self._events.save(event)
            exp_id = int(event.exp["id"])
        if activate:
            self.set_state(exp_id, State.ACTIVE)
        return exp_id

    def set_state(self, experiment_id: int, state: State) -> None:
        """Pause or activate an experiment and its live trials (same state: no-op).

        Raises:
            NotFound, FailedPrecondition: terminal or incompatible state.
        """
        with self._events.event(experiment_id) as event:
            if event.state == state:
                return
            if event.state.is_terminal:
                raise FailedPrecondition(f"experiment {experiment_id} is in terminal state")
            if state not in (State.ACTIVE, State.PAUSED) or event.state.is_stopping:
                raise FailedPrecondition(
                    f"experiment {experiment_id} in incompatible state {event.state.value}"
                )
            event.set_state(state)
            for trial in _trials.trials_of(event.conn, experiment_id):
                if State(trial["state"]) in (State.ACTIVE, State.PAUSED):
                    _trials.update_trial(event.conn, trial["id"], state=state)
                    if state == State.PAUSED:
                        act.preempt_live(event, trial["id"])

    def stop(self, experiment_id: int, stop: State) -> None:
        """Cancel (``STOPPING_CANCELED``: running trials are preempted) or kill
        (``STOPPING_KILLED``: the resource manager kills their processes) an experiment.
        Terminal or already-stopping experiments are a no-op, except that a kill upgrades a
        cancel (docs/reference/master.md §4.1)."""
        if stop not in (State.STOPPING_CANCELED, State.STOPPING_KILLED):
            raise InvalidArgument(f"{stop.value} is not a cancel or a kill")
        with self._events.event(experiment_id) as event:
            upgrade = event.state == State.STOPPING_CANCELED and stop == State.STOPPING_KILLED
            if event.state.is_terminal or (event.state.is_stopping and not upgrade):
                return
            act.stop(event, stop)

    def kill_trial(self, trial_id: int) -> None:
        """Kill one trial: its process is killed and it ends CANCELED; the search sees a
        user cancel (random does not replace it). A terminal trial is a no-op."""
        with self._events.trial_event(trial_id) as (event, trial):
            state = State(trial["state"])
            if state.is_terminal:
                return
            if _trials.live_allocation(event.conn, trial_id) is not None:
                new = trial_escalation(state, State.STOPPING_KILLED)
                _trials.update_trial(event.conn, trial_id, state=new)
                return
            act.end_trial(event, trial, State.CANCELED)
            act.maybe_end_experiment(event)

    def continue_trial(
        self,
        experiment_id: int,
        check: Callable[[ExperimentRow, list[TrialRow]], dict[str, Any]],
    ) -> None:
        """``det e continue``: an ended experiment trains again. ``check(experiment, trials)``
        returns the config to run under (it raises a 4xx for a request it refuses).

        A single-trial experiment runs its trial to the config's ``max_length``, with the
        config's hyperparameters (those that changed are drawn again, seeded by the trial).
        A grid or random search runs each trial that did not complete (errored, canceled,
        killed) again to its length; as in 0.37, one whose trials all completed is refused.
        Each trial resumes from its latest checkpoint as any new run does, under a new task
        (``<previous task id>-<n>``, as 0.37), and its restart count starts over; the
        experiment is ACTIVE until they end."""
        with self._events.event(experiment_id) as event:
            if isinstance(event.method, searcher.CustomSearch):
                raise FailedPrecondition(
                    f"experiment {experiment_id} uses a custom search, which cannot be "
                    "continued: run the search runner again to start a new experiment"
                )
            if event.unmanaged:
                raise FailedPrecondition(
                    f"experiment {experiment_id} is unmanaged: the master does not run it; "
                    "rerun its script with the same external ids to continue it"
                )
            trials = _trials.trials_of(event.conn, experiment_id)
            name = (event.exp["config"].get("searcher") or {}).get("name")
            single = name == "single"
            if single and len(trials) != 1:
                raise FailedPrecondition(
                    f"experiment {experiment_id} has {len(trials)} trials; a single-searcher "
                    "experiment continues its one trial"
                )
            live = [t for t in trials if not State(t["state"]).is_terminal]
            if not event.state.is_terminal or (single and live):
                raise FailedPrecondition(
                    f"experiment in non terminal state '{event.state.value}', try again later "
                    "(continue it once it has ended, or pause and activate it instead)"
                )
            config = check(event.exp, trials)
            again = trials if single else [t for t in trials if t["state"] != State.COMPLETED.value]
            if not again:
                raise FailedPrecondition(
                    "experiment has been completed, cannot continue this experiment: all of "
                    f"its {len(trials)} trials completed (create a new experiment to search more)"
                )
            length = searcher.max_length_units(config["searcher"])
            # The search as it was, under the new config (a longer max_length counts in
            # progress), with the chosen trials live again.
            event.method = searcher.restore_search_method(
                config["searcher"], config.get("hyperparameters"), event.method.snapshot()
            )
            old_hps = event.exp["config"].get("hyperparameters") or {}
            for trial in again:
                event.method.reopen(trial["request_id"], length)
                hparams = _redrawn_hparams(trial, old_hps, config.get("hyperparameters") or {})
                # A new task per continue, named as 0.37 names it (``<previous>-<n>``): its
                # runs, logs and log policies start afresh; the trial's logs span them all.
                n = len(_trials.task_ids_of(event.conn, trial))
                _trials.update_trial(
                    event.conn,
                    trial["id"],
                    task_id=f"{trial['task_id']}-{n}",
                    state=State.ACTIVE,
                    end_time=None,
                    restarts=0,
                    early_exit=None,
                    op_length=length,
                    op_complete=False,
                    op_closed=True,  # the search's Close stands: one operation, then done
                    hparams=hparams,
                )
            event.exp["state"] = State.ACTIVE.value
            event.exp["end_time"] = None
            event.exp["config"] = config
            _experiments.update_experiment(
                event.conn, experiment_id, state=State.ACTIVE, end_time=None, config=config
            )


def _redrawn_hparams(trial: TrialRow, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The trial's hyperparameters under a continue's ``new`` space: those whose definition
    is unchanged keep their value, changed or added ones are drawn from ``new`` (a constant is
    its value) with the trial's seed, removed ones go."""
    changed = {k: v for k, v in new.items() if k not in old or old[k] != v}
    if not changed and set(new) == set(old):
        return dict(trial["hparams"])
    drawn = searcher.sample(
        searcher.parse_hyperparameters(changed), searcher.NpRand(int(trial["seed"]) % 2**32)
    )
    kept = {k: v for k, v in trial["hparams"].items() if k in new and k not in changed}
    return {**kept, **drawn}
