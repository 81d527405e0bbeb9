"""Experiment bookkeeping: archive and unarchive, edit (name, notes, labels, resources, GC
policy), delete. None of it asks the search method anything."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from determined.master._errors import FailedPrecondition, InvalidArgument
from determined.master.experiment._events import EventRunner
from determined.master.store import ExperimentRow, State, _experiments


class Bookkeeping:
    """The bookkeeping of :class:`Experiments`: plain transactions on the experiment row,
    under the event runner's lock."""

    def __init__(self, events: EventRunner) -> None:
        self._events = events

    def set_archived(self, experiment_id: int, archived: bool) -> None:
        """Archive (hide from default listings) or unarchive an ended experiment.

        Raises:
            NotFound, FailedPrecondition: not terminal, or already (un)archived.
        """
        verb = "archive" if archived else "unarchive"
        with self._events.transaction() as conn:
            exp = _experiments.require_experiment(conn, experiment_id)
            if bool(exp["archived"]) == archived:
                already = "already archived" if archived else "not archived"
                raise FailedPrecondition(f"Experiment is {already}: experiment {experiment_id}")
            if not State(exp["state"]).is_terminal:
                raise FailedPrecondition(
                    f"Experiment is not in terminal state: experiment {experiment_id} is "
                    f"{exp['state']}; only an ended experiment can be {verb}d "
                    "(wait for it, or cancel or kill it first)"
                )
            _experiments.update_experiment(conn, experiment_id, archived=archived)

    def patch(self, experiment_id: int, values: dict[str, Any]) -> None:
        """Change an experiment's name, description, labels, notes, ``resources`` fields or
        checkpoint GC policy (``checkpoint_storage`` fields), at any state.

        Raises:
            NotFound, InvalidArgument: an empty name.
        """
        with self._events.transaction() as conn:
            exp = _experiments.require_experiment(conn, experiment_id)
            config = dict(exp["config"])
            row: dict[str, Any] = {}
            if values.get("name") is not None:
                if not str(values["name"]).strip():
                    raise InvalidArgument("`name` must not be an empty or whitespace string.")
                config["name"] = values["name"]
            for key in ("description", "labels"):
                if values.get(key) is not None:
                    config[key] = values[key]
            for key in ("resources", "checkpoint_storage"):
                if values.get(key):
                    config[key] = {**(config.get(key) or {}), **values[key]}
            if values.get("notes") is not None:
                row["notes"] = values["notes"]
            _experiments.update_experiment(conn, experiment_id, config=config, **row)

    def delete(self, experiment_id: int) -> None:
        """Remove an ended experiment's records (its checkpoint files must be gone already).

        Raises:
            NotFound, FailedPrecondition: not terminal.
        """
        with self._events.transaction() as conn:
            self.check_deletable(conn, experiment_id)
            _experiments.delete_experiment(conn, experiment_id)
            self._events.forget(experiment_id)

    def check_deletable(self, conn: sa.Connection, experiment_id: int) -> ExperimentRow:
        """The experiment row if it may be deleted (terminal). Raises NotFound or
        FailedPrecondition."""
        exp = _experiments.require_experiment(conn, experiment_id)
        if not State(exp["state"]).is_terminal:
            raise FailedPrecondition(
                f"cannot delete experiment {experiment_id} in {exp['state']}: only an ended "
                "experiment can be deleted (cancel or kill it first)"
            )
        return exp
