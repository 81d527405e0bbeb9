"""The master's side of an unmanaged trial, seen from the user's process: register the
experiment and the trial (by external ids when given), start a run, report the trial's state.
0.37's routes and bodies (docs/core_v2.md)."""

from __future__ import annotations

import logging
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

import yaml

import determined as det
from determined.common.api import Session, _routes
from determined.core._distributed import DistributedContext

logger = logging.getLogger("determined.core")

# How often a live unmanaged trial says so (0.37: once a minute).
HEARTBEAT_S = 60.0


def _on_chief(dist: DistributedContext | None, fn: Callable[[], Any]) -> Any:
    """``fn()`` on rank 0 only, its result broadcast to every rank."""
    if dist is None or dist.size == 1:
        return fn()
    return dist.broadcast(fn() if dist.rank == 0 else None)


def register(
    session: Session,
    config: dict[str, Any],
    *,
    hparams: dict[str, Any] | None,
    external_experiment_id: str | None,
    external_trial_id: str | None,
    distributed: DistributedContext | None,
) -> det.ClusterInfo:
    """Create (or find) the experiment and the trial, start a run of it, and return the
    cluster info a trial of this master would have (with the user's token)."""
    if external_trial_id is not None and external_experiment_id is None:
        raise ValueError(
            "external_trial_id needs external_experiment_id too: a trial is found again within "
            "its experiment; set both (or neither)"
        )
    text = yaml.safe_dump(config, sort_keys=False)

    def create() -> dict[str, Any]:
        body = {"config": text, "unmanaged": True}
        if external_experiment_id is None:
            resp = _routes.create_experiment(session, body)
        else:
            resp = _routes.put_experiment_by_external_id(session, external_experiment_id, body)
        exp_id = int(resp["experiment"]["id"])
        trial_body = {"experimentId": exp_id, "hparams": hparams or {}, "unmanaged": True}
        if external_trial_id is None:
            trial = _routes.create_trial(session, trial_body)
        else:
            trial = _routes.put_trial_by_external_id(session, trial_body, external_trial_id)
        trial_id = int(trial["id"])
        start = _routes.start_trial(session, trial_id)
        master = _routes.get_master(session)
        return {
            "experiment": resp["experiment"],
            "config": resp.get("config") or config,
            "trial": trial,
            "start": start,
            "cluster_id": master.get("clusterId", ""),
        }

    got = _on_chief(distributed, create)
    trial, start = got["trial"], got["start"]
    return det.ClusterInfo(
        master_url=session.master_url,
        cluster_id=str(got["cluster_id"]),
        agent_id="unmanaged",
        slot_ids=[],
        task_id=str(trial["taskId"]),
        allocation_id=str(trial["taskId"]),  # no allocation: the task stands in, as in 0.37
        session_token="",  # the user's token lives in the session, never in the info
        task_type="TRIAL",
        latest_checkpoint=start.get("latestCheckpoint"),
        trial_info=det.TrialInfo(
            trial_id=int(trial["id"]),
            experiment_id=int(got["experiment"]["id"]),
            trial_seed=0,
            hparams=dict(trial.get("hparams") or hparams or {}),
            config=dict(got["config"]),
            steps_completed=int(start.get("stepsCompleted") or 0),
            trial_run_id=int(start["trialRunId"]),
        ),
        rendezvous_info=det.RendezvousInfo(["127.0.0.1"], 0, [1]),
    )


class TrialState:
    """Tells the master the trial runs (on start, then a heartbeat), and on close whether it
    completed or failed. The outcome is read from the process: an uncaught exception or a
    non-zero ``sys.exit`` is an error, as in 0.37."""

    def __init__(self, session: Session, trial_id: int) -> None:
        self._session = session
        self._trial_id = trial_id
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: str | None = None
        self._orig_excepthook = sys.excepthook
        self._orig_exit = sys.exit

    def _patch(self, state: str | None) -> None:
        body: dict[str, Any] = {"trialId": self._trial_id}
        if state is not None:
            body["state"] = state
        _routes.patch_trial(self._session, self._trial_id, body)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._patch(None)
            except Exception as e:  # a missed heartbeat changes nothing: try again later
                logger.warning(f"unmanaged trial {self._trial_id}: heartbeat failed: {e}")

    def _excepthook(
        self, kind: type[BaseException], exc: BaseException, tb: types.TracebackType | None
    ) -> None:
        if not isinstance(exc, KeyboardInterrupt):
            self._failure = f"{kind.__name__}: {exc}"
        else:
            self._failure = "interrupted"
        self._orig_excepthook(kind, exc, tb)

    def _exit(self, code: Any = 0) -> None:
        if code not in (None, 0):
            self._failure = f"exit code {code}"
        self._orig_exit(code)

    def start(self) -> None:
        self._patch("STATE_RUNNING")
        sys.excepthook = self._excepthook
        sys.exit = self._exit  # type: ignore[assignment]
        self._thread = threading.Thread(target=self._beat, name="unmanaged-heartbeat", daemon=True)
        self._thread.start()

    def close(self, failure: BaseException | None = None) -> None:
        """Report COMPLETED, or ERROR when ``failure`` is given or the process is failing."""
        self._stop.set()
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._orig_excepthook
        if sys.exit == self._exit:
            sys.exit = self._orig_exit
        why = (f"{type(failure).__name__}: {failure}" if failure else None) or self._failure
        if why is None:
            self._patch("STATE_COMPLETED")
            return
        logger.error(f"unmanaged trial {self._trial_id} failed: {why}")
        self._patch("STATE_ERROR")
