"""Search runners: they create the custom-search experiment, read its searcher events from the
master, hand each to the ``SearchMethod`` and post the operations it returns, saving their
state after every event so that a restarted runner continues (docs/reference/custom_searchers.md).
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import time
import uuid
from collections.abc import Iterable
from typing import Any

import yaml

from determined import errors
from determined.common import _context
from determined.common.api import Session, _routes
from determined.searcher._search_method import (
    Close,
    ExitedReason,
    Operation,
    Progress,
    SearcherState,
    SearchMethod,
    _operation_from_wire,
)

EXPERIMENT_ID_FILE = "experiment_id.txt"
OPS_FILE = "ops.json"
logger = logging.getLogger("determined.searcher")
# The master holds a GET of searcher events for up to 60 s; wait a little longer than that.
_EVENTS_TIMEOUT_S = 90.0


class _ExperimentInactiveException(Exception):
    def __init__(self, exp_state: str) -> None:
        super().__init__(exp_state)
        self.exp_state = exp_state


class SearchRunner:
    """Drives a ``SearchMethod`` with the searcher events of one experiment. Subclasses say
    where the state is saved (:class:`LocalSearchRunner`, ``RemoteSearchRunner``)."""

    def __init__(self, search_method: SearchMethod) -> None:
        self.search_method = search_method
        self.state = SearcherState()

    def _get_operations(self, event: dict[str, Any]) -> list[Operation]:
        """Update the state with ``event`` and ask the method what to do about it."""
        state = self.state
        method = self.search_method
        operations: list[Operation]
        if event.get("initialOperations") is not None:
            logger.info("initial operations")
            operations = list(method.initial_operations(state))
        elif event.get("trialCreated") is not None:
            request_id = uuid.UUID(event["trialCreated"]["requestId"])
            logger.info(f"trialCreated({request_id})")
            state.trials_created.add(request_id)
            state.trial_progress[request_id] = 0.0
            operations = list(method.on_trial_created(state, request_id))
        elif event.get("trialClosed") is not None:
            request_id = uuid.UUID(event["trialClosed"]["requestId"])
            logger.info(f"trialClosed({request_id})")
            state.trials_closed.add(request_id)
            operations = list(method.on_trial_closed(state, request_id))
            operations.append(Progress(method.progress(state)))
        elif event.get("trialExitedEarly") is not None:
            body = event["trialExitedEarly"]
            if body.get("exitedReason") is None:
                raise RuntimeError("trialExitedEarly event is invalid without exitedReason")
            reason = ExitedReason._from_wire(body["exitedReason"])
            request_id = uuid.UUID(body["requestId"])
            logger.info(f"trialExitedEarly({request_id}, {reason})")
            if reason == ExitedReason.INVALID_HP:
                state.trial_progress.pop(request_id, None)
            elif reason == ExitedReason.ERRORED:
                state.failures.add(request_id)
            operations = list(method.on_trial_exited_early(state, request_id, reason))
            operations.append(Progress(method.progress(state)))
        elif event.get("validationCompleted") is not None:
            body = event["validationCompleted"]
            request_id = uuid.UUID(body["requestId"])
            logger.info(f"validationCompleted({request_id}, {body.get('metric')})")
            if body.get("metric") is None:
                raise RuntimeError("validationCompleted event is invalid without a metric")
            operations = list(
                method.on_validation_completed(
                    state, request_id, body["metric"], int(body["validateAfterLength"])
                )
            )
            operations.append(Progress(method.progress(state)))
        elif event.get("experimentInactive") is not None:
            raise _ExperimentInactiveException(event["experimentInactive"]["experimentState"])
        elif event.get("trialProgress") is not None:
            body = event["trialProgress"]
            request_id = uuid.UUID(body["requestId"])
            state.trial_progress[request_id] = float(body["partialUnits"])
            operations = [Progress(method.progress(state))]
        else:
            raise RuntimeError(f"Unsupported event {event}")
        return operations

    def run_experiment(
        self,
        experiment_id: int,
        session: Session,
        prior_operations: list[Operation] | None,
        sleep_time: float = 1.0,
    ) -> None:
        """Handle the experiment's events until it is no longer active (a paused experiment
        is waited for). A master that cannot be reached (restarting) is waited for too."""
        active = True
        try:
            while active:
                time.sleep(sleep_time)  # the call below long-polls; never call it in a loop
                try:
                    active, prior_operations = self._handle_events(
                        experiment_id, session, prior_operations
                    )
                except errors.MasterUnreachable as e:
                    # The state of the last event is saved: once the master answers again,
                    # that event is either acknowledged or comes back first and its
                    # operations are sent again.
                    logger.warning(f"master unreachable, retrying: {e}")
                except errors.MasterError as e:
                    if e.status < 500:
                        raise
                    logger.warning(f"master error, retrying: {e}")
        except KeyboardInterrupt:
            print("Runner interrupted")

    def _handle_events(
        self,
        experiment_id: int,
        session: Session,
        prior_operations: list[Operation] | None,
    ) -> tuple[bool, list[Operation] | None]:
        """One long poll and its events: (still active, the operations of the last saved
        event)."""
        events = self.get_events(session, experiment_id)
        if not events:
            return True, prior_operations
        # The first event may be one already handled: its state was saved, then the runner
        # stopped (or lost the master) before its operations got through. Send them again.
        last_event_id = self.state.last_event_id
        first = True
        for event in events:
            event_id = int(event["id"])
            if (
                first
                and last_event_id != 0
                and last_event_id >= event_id >= 0
                and prior_operations is not None
            ):
                logger.info(f"Resubmitting operations for event.id={event_id}")
                operations = prior_operations
            else:
                inactive = event.get("experimentInactive")
                if inactive is not None:
                    exp_state = str(inactive.get("experimentState"))
                    logger.info(f"experiment {experiment_id} is inactive; state={exp_state}")
                    if exp_state == "STATE_COMPLETED":
                        self.state.experiment_completed = True
                    elif exp_state == "STATE_ERROR":
                        self.state.experiment_failed = True
                    if exp_state == "STATE_PAUSED":
                        self._show_experiment_paused_msg()
                        return True, prior_operations
                    return False, prior_operations
                operations = self._get_operations(event)
                self.state.last_event_id = event_id
                self.save_state(experiment_id, operations)
                prior_operations = operations
            first = False
            self.post_operations(session, experiment_id, event, operations)
        return True, prior_operations

    def post_operations(
        self,
        session: Session,
        experiment_id: int,
        event: dict[str, Any],
        operations: list[Operation],
    ) -> None:
        """Send ``operations`` as the answer to ``event`` (which acknowledges it)."""
        body = {
            "experimentId": experiment_id,
            "searcherOperations": [op._to_searcher_operation() for op in operations],
            "triggeredByEvent": event,
        }
        try:
            _routes.post_searcher_operations(session, experiment_id, body)
        except errors.MasterError as e:
            # the master answered: the operations were refused, nothing happened
            logger.warning(f"operations {operations} for event {event.get('id')} refused: {e}")
            if not any(isinstance(o, Close) for o in operations) or "not found" not in str(e):
                raise

    def get_events(self, session: Session, experiment_id: int) -> list[dict[str, Any]] | None:
        """The pending events (long-polled by the master)."""
        return _routes.get_searcher_events(session, experiment_id, _EVENTS_TIMEOUT_S)

    def save_state(self, experiment_id: int, operations: list[Operation]) -> None:
        """Persist the state after an event (the base class keeps nothing)."""

    def _show_experiment_paused_msg(self) -> None:
        pass


class LocalSearchRunner(SearchRunner):
    """Runs a custom search in this process against a master: creates the experiment once,
    then handles its events. Its state lives in ``searcher_dir`` (default: the working
    directory); running it again with the same directory continues the same experiment.

    ``session`` is a logged-in :class:`~determined.common.api.Session`; without one the
    runner uses the SDK's login (``client.login()``, else ``$DET_MASTER`` and the token store
    of ``det user login``, else ``$DET_USER``/``$DET_PASS``), as 0.37's does.
    """

    def __init__(
        self,
        search_method: SearchMethod,
        searcher_dir: pathlib.Path | None = None,
        session: Session | None = None,
    ) -> None:
        super().__init__(search_method)
        self.session = session
        self.searcher_dir = pathlib.Path(searcher_dir or pathlib.Path.cwd())
        if not self.searcher_dir.exists():
            self.searcher_dir.mkdir(parents=True)
        elif not self.searcher_dir.is_dir():
            raise FileExistsError(
                f"searcher_dir={self.searcher_dir} already exists and is not a directory"
            )

    def run(
        self,
        exp_config: dict[str, Any] | str,
        model_dir: str | None = None,
        includes: Iterable[str | pathlib.Path] | None = None,
    ) -> int:
        """Create the experiment (or resume the one this directory knows) and run the search
        until the experiment ends. Returns the experiment id.

        Args:
            exp_config: the experiment config, as a dict or the path of a YAML file; its
                searcher must be ``name: custom``.
            model_dir: the model definition directory (default: the working directory).
            includes: more files or directories to send with the model definition.
        """
        session = self.session or _default_session()
        id_file = self.searcher_dir.joinpath(EXPERIMENT_ID_FILE)
        operations: list[Operation] | None = None
        if id_file.exists():
            experiment_id = int(id_file.read_text())
            logger.info(f"Resuming HP searcher for experiment {experiment_id}")
            _, operations = self.load_state(experiment_id)
        else:
            experiment_id = _create_experiment(
                session, exp_config, model_dir or os.getcwd(), includes
            )
            self._get_state_path(experiment_id).mkdir(parents=True, exist_ok=True)
            self.state.experiment_id = experiment_id
            self.state.last_event_id = 0
            self.save_state(experiment_id, [])
            tmp = id_file.with_suffix(".tmp")
            tmp.write_text(str(experiment_id))
            tmp.replace(id_file)
            logger.info(f"Created experiment {experiment_id}")
        self.run_experiment(experiment_id, session, operations)
        return experiment_id

    def load_state(self, experiment_id: int) -> tuple[int, list[Operation]]:
        """The state saved after the last handled event, and that event's operations."""
        exp_dir = self._get_state_path(experiment_id)
        last_event_id = int(exp_dir.joinpath("event_id").read_text())
        state_path = exp_dir.joinpath(f"event_{last_event_id}")
        self.state, loaded_id = self.search_method.load(state_path)
        if loaded_id != experiment_id:
            raise ValueError(
                f"{state_path} holds the state of experiment {loaded_id}, not {experiment_id}; "
                "use a separate searcher_dir per search"
            )
        ops = json.loads(state_path.joinpath(OPS_FILE).read_text())
        return loaded_id, [_operation_from_wire(op) for op in ops]

    def save_state(self, experiment_id: int, operations: list[Operation]) -> None:
        """Write the state and ``operations`` under ``event_<id>/``, then point ``event_id`` at
        it (a rename: a runner killed meanwhile resumes from the previous event)."""
        exp_dir = self._get_state_path(experiment_id)
        state_path = exp_dir.joinpath(f"event_{self.state.last_event_id}")
        state_path.mkdir(parents=True, exist_ok=True)
        self.search_method.save(self.state, state_path, experiment_id=experiment_id)
        ops = [op._to_searcher_operation() for op in operations]
        state_path.joinpath(OPS_FILE).write_text(json.dumps(ops))
        new = exp_dir.joinpath("event_id_new")
        new.write_text(str(self.state.last_event_id))
        os.replace(new, exp_dir.joinpath("event_id"))

    def _get_state_path(self, experiment_id: int) -> pathlib.Path:
        return self.searcher_dir.joinpath(f"exp_{experiment_id}")

    def _show_experiment_paused_msg(self) -> None:
        logger.warning(
            f"Experiment {self.state.experiment_id} has been paused. A runner left running "
            "continues the search when it is activated again; a runner stopped now can be "
            "started again later with the same searcher_dir."
        )


def _default_session() -> Session:
    """The SDK's session, as 0.37's runners use: the one ``client.login()`` made, else one
    from ``$DET_MASTER`` and the token store ``det user login`` writes (then ``$DET_USER`` /
    ``$DET_PASS``, then the default user)."""
    # Imported here: the SDK imports much that a search method's module does not need.
    from determined.experimental import client

    client._require_singleton(lambda: None)()
    assert client._determined is not None, "made by _require_singleton"
    return client._determined._session


def _create_experiment(
    session: Session,
    exp_config: dict[str, Any] | str,
    model_dir: str,
    includes: Iterable[str | pathlib.Path] | None,
) -> int:
    """POST the experiment (its config and model definition); return its id."""
    if isinstance(exp_config, str):
        config_text = pathlib.Path(exp_config).read_text()
    else:
        config_text = yaml.safe_dump(exp_config, sort_keys=False)
    files = _context.read_context(pathlib.Path(model_dir))
    for include in includes or []:
        path = pathlib.Path(include)
        if path.is_dir():
            for entry in _context.read_context(path):
                files.append({**entry, "path": f"{path.name}/{entry['path']}"})
        else:
            parent = _context.read_context(path.parent)
            files.extend(e for e in parent if e["path"] == path.name)
    body = {
        "activate": True,
        "config": config_text,
        "modelDefinition": files,
        "parentId": None,
        "projectId": None,
        "validateOnly": False,
    }
    return int(_routes.create_experiment(session, body)["experiment"]["id"])
