"""The master's services: what the routers use (store, experiments, resource manager, ...),
built once by ``_app.create_app`` (the app's ``services``) and read through :func:`services`.

One typed object, not attributes on Starlette's untyped ``app.state``: mypy checks what a
router reads.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from starlette.requests import HTTPConnection

from determined.master._log_buffer import MasterLog
from determined.master._read_workers import ReadWorkers
from determined.master._signals import Signals
from determined.master.experiment import ContainerDefaults, Experiments
from determined.master.ingest import Ingest, WriteWorker
from determined.master.resources import LogRetention, ResourceManager, Sandbox
from determined.master.resources._log_capture import LogHook
from determined.master.store import Store
from determined.master.webhooks import Webhooks

if TYPE_CHECKING:  # _stream reads its services here: only the type is needed this way
    from determined.master.api._stream import Stamps


@dataclasses.dataclass(eq=False)
class Services:
    store: Store
    signals: Signals
    experiments: Experiments
    # None: nothing runs trials or tasks here but the dev endpoints.
    rm: ResourceManager | None
    webhooks: Webhooks
    # What every stored batch of task log lines goes through (log policies, webhooks), in
    # its transaction.
    log_hook: LogHook
    log_retention: LogRetention
    # Where heavy reads are answered (worker processes, or this one): see _read_workers.
    reads: ReadWorkers
    # The metric reports' own process; None: they are committed in this one.
    write_worker: WriteWorker | None
    ingest: Ingest
    # What trial and task processes start in (``task_isolation``).
    sandbox: Sandbox
    # The master config's ``task_container_defaults``, laid under every new config.
    container_defaults: ContainerDefaults
    # The ``seq`` of the /stream websocket's rows, shared by its connections.
    stream_stamps: Stamps
    master_id: str
    cluster_name: str
    # ``GET /api/v1/master/config``: the command line sets it after create_app.
    master_config: dict[str, Any]
    # The master's own log lines, where the process installed a buffer (not when embedded).
    master_log: MasterLog | None = None


def services(conn: HTTPConnection) -> Services:
    """The services of the app serving ``conn`` (a request or a websocket)."""
    found: Services = conn.app.services
    return found
