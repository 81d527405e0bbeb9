"""``RemoteSearchRunner``: the search runs as a trial of a single-trial experiment on the
cluster; its state goes into that trial's checkpoints, so a preempted or restarted runner
continues from the last one."""

from __future__ import annotations

import json
import logging
import os
import pathlib
from collections.abc import Iterable
from typing import Any

import determined as det
from determined import core
from determined.common.api import Session
from determined.searcher._search_method import Operation, SearchMethod, _operation_from_wire
from determined.searcher._search_runner import (
    OPS_FILE,
    SearchRunner,
    _create_experiment,
    _default_session,
)

logger = logging.getLogger("determined.searcher")


class RemoteSearchRunner(SearchRunner):
    """Runs a custom search inside a trial (``core.init()``'s ``context``): it creates the
    searched experiment once and checkpoints its state after every event.

    ``session`` is a logged-in user session for the searched experiment; without one it uses
    the SDK's login to the trial's master (``client.login()``, the token store, else
    ``$DET_USER``/``$DET_PASS``), as 0.37's does.
    """

    def __init__(
        self,
        search_method: SearchMethod,
        context: core.Context,
        session: Session | None = None,
    ) -> None:
        super().__init__(search_method)
        self.context = context
        self.session = session
        info = det.get_cluster_info()
        if info is None:
            raise RuntimeError("RemoteSearchRunner only runs on-cluster (inside a trial)")
        self.info = info
        self.latest_checkpoint = info.latest_checkpoint

    def run(
        self,
        exp_config: dict[str, Any] | str,
        model_dir: str | None = None,
        includes: Iterable[str | pathlib.Path] | None = None,
    ) -> int:
        """Create the searched experiment (or resume from the trial's latest checkpoint) and
        run the search until it ends; returns the searched experiment's id."""
        if self.session is None:
            os.environ.setdefault("DET_MASTER", self.info.master_url)
            self.session = _default_session()
        operations: list[Operation] | None = None
        if self.latest_checkpoint is not None:
            experiment_id, operations = self.load_state(self.latest_checkpoint)
            logger.info(f"Resuming HP searcher for experiment {experiment_id}")
        else:
            logger.info("No latest checkpoint. Starting new experiment.")
            experiment_id = _create_experiment(
                self.session, exp_config, model_dir or os.getcwd(), includes
            )
            self.state.experiment_id = experiment_id
            self.state.last_event_id = 0
            self.save_state(experiment_id, [])
            logger.info(f"Created experiment {experiment_id}")
        self.run_experiment(experiment_id, self.session, operations)
        return experiment_id

    def load_state(self, storage_id: str) -> tuple[int, list[Operation]]:
        """The state and last operations saved in checkpoint ``storage_id``."""
        with self.context.checkpoint.restore_path(storage_id) as path:
            self.state, experiment_id = self.search_method.load(path)
            ops = json.loads(path.joinpath(OPS_FILE).read_text())
        return experiment_id, [_operation_from_wire(op) for op in ops]

    def save_state(self, experiment_id: int, operations: list[Operation]) -> None:
        """A checkpoint of the state after the last event (``steps_completed``: its id)."""
        metadata = {"steps_completed": self.state.last_event_id}
        with self.context.checkpoint.store_path(metadata) as (path, _):
            self.search_method.save(self.state, path, experiment_id=experiment_id)
            ops = [op._to_searcher_operation() for op in operations]
            path.joinpath(OPS_FILE).write_text(json.dumps(ops))

    def _show_experiment_paused_msg(self) -> None:
        logger.warning(
            f"Experiment {self.state.experiment_id} has been paused; the search continues "
            "when it is activated again."
        )
