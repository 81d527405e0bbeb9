"""DistributedContext: rank information and simple pickle-based collectives between the
processes of one trial, over ZMQ (see docs/core/distributed.md)."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import types
from typing import Any

import zmq

from determined import _info, errors
from determined.core._ipc import BroadcastClient, BroadcastServer, Group

PORT_1_ENV = "INTER_TRAIN_PROCESS_COMM_PORT_1"
PORT_2_ENV = "INTER_TRAIN_PROCESS_COMM_PORT_2"
DEFAULT_PORT_1 = 12360
PORT_2_GAP = 16  # PORT_2 defaults to PORT_1 + 16, as in the reference
TIMEOUT_ENV = "DET_DISTRIBUTED_TIMEOUT"
COLLECTIVE_TIMEOUT_ENV = "DET_DISTRIBUTED_COLLECTIVE_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0
_MAX_IPC_PATH = 100  # sun_path holds about 107 bytes


def default_ports() -> tuple[int, int]:
    """The (pub, pull) ports: ``INTER_TRAIN_PROCESS_COMM_PORT_1`` and ``_2`` as the launcher
    set them (our master exports them with the trial's unique port offset added, as 0.37's
    does); without them 12360 plus the trial's ``DET_UNIQUE_PORT_OFFSET`` (0 off a cluster).
    PORT_2 defaults to PORT_1 + 16."""
    port_1 = _env_number(PORT_1_ENV, int, None)
    if port_1 is None:
        port_1 = DEFAULT_PORT_1 + _training_port_offset()
    return port_1, _env_number(PORT_2_ENV, int, port_1 + PORT_2_GAP)


def _env_number(name: str, kind: type, default: Any) -> Any:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(
            f"{name}={raw!r} is not a valid {kind.__name__}; unset or fix it"
        ) from None


class DistributedContext:
    """Rank information and pickle-based collectives for the processes of one trial.

    Every process of the trial constructs one, with its own ranks. The constructor blocks until
    all ranks have connected (at most ``timeout`` seconds). The chief (rank 0) binds ZMQ PUB/PULL
    sockets on ``pub_port``/``pull_port``; the other ranks connect to ``chief_ip``. The ranks of
    one machine also share a node-local channel over unix sockets (TCP on 127.0.0.1 when unix
    sockets are unavailable or ``force_tcp`` is set). With ``size < 2`` nothing is opened and the
    collectives return their input (gathers as ``[x]``).

    The collectives are for coordination (metrics, paths, decisions), not for tensors: use your
    training framework's collectives for those. Every rank must call them in the same order.

    Args:
        rank, size: this process's index in the trial, and the number of processes.
        local_rank, local_size: the index on this machine, and the processes on this machine.
        cross_rank, cross_size: this machine's index, and the number of machines.
        chief_ip: address of rank 0's machine; required when ``local_size != size``
            (AssertionError otherwise, as in the reference).
        pub_port, pull_port: the chief's ports; default ``INTER_TRAIN_PROCESS_COMM_PORT_1``
            and ``_2`` (which the master sets per trial), else 12360 and PORT_1 + 16 plus the
            trial's unique port offset: see :func:`default_ports`.
        port_offset: added to both ports.
        force_tcp: use TCP for the node-local channel even where unix sockets exist.
        timeout: seconds to wait for all ranks to connect; default ``DET_DISTRIBUTED_TIMEOUT``
            or 300. Raises :class:`determined.errors.DistributedTimeout` past it.
        collective_timeout: seconds one collective may wait for its peers; default
            ``DET_DISTRIBUTED_COLLECTIVE_TIMEOUT`` or no limit (a slow peer is not an error).

    A peer that dies makes the ranks waiting on it raise
    :class:`determined.errors.DistributedPeerLost` within moments; the context is then closed.
    """

    def __init__(
        self,
        *,
        rank: int,
        size: int,
        local_rank: int,
        local_size: int,
        cross_rank: int,
        cross_size: int,
        chief_ip: str | None = None,
        pub_port: int | None = None,
        pull_port: int | None = None,
        port_offset: int = 0,
        force_tcp: bool = False,
        timeout: float | None = None,
        collective_timeout: float | None = None,
    ) -> None:
        _validate_ranks(rank, size, local_rank, local_size, cross_rank, cross_size)
        self.rank, self.size = rank, size
        self.local_rank, self.local_size = local_rank, local_size
        self.cross_rank, self.cross_size = cross_rank, cross_size
        if local_size != size and chief_ip is None:
            raise AssertionError(
                f"local_size ({local_size}) != size ({size}), so the job spans several machines, "
                "but chief_ip is None: pass chief_ip= or set DET_CHIEF_IP to rank 0's address."
            )
        self._chief_ip = chief_ip if local_size != size else "127.0.0.1"
        default_pub, default_pull = default_ports()
        self._pub_port = (default_pub if pub_port is None else pub_port) + port_offset
        self._pull_port = (default_pull if pull_port is None else pull_port) + port_offset
        self._timeout = _resolve_timeout(timeout, TIMEOUT_ENV, DEFAULT_TIMEOUT_S)
        self._collective_timeout = _resolve_timeout(collective_timeout, COLLECTIVE_TIMEOUT_ENV, 0)
        self._global: Group | None = None
        self._local: Group | None = None
        self._tempdir: str | None = None
        self._failure: str | None = None
        self._closed = False
        self._zmq: zmq.Context | None = None
        if size >= 2:
            self._zmq = zmq.Context()
            try:
                self._init_ipc(force_tcp)
            except BaseException:
                self.close()
                raise

    def _init_ipc(self, force_tcp: bool) -> None:
        assert self._zmq is not None
        pub = f"tcp://{self._chief_ip}:{self._pub_port}"
        pull = f"tcp://{self._chief_ip}:{self._pull_port}"
        if self.rank == 0:
            expected = range(1, self.size)
            bind_pub, bind_pull = f"tcp://*:{self._pub_port}", f"tcp://*:{self._pull_port}"
            server = BroadcastServer(self._zmq, bind_pub, bind_pull, expected)
            self._global = Group(0, server)
            server.start(self._timeout)
        else:
            client = BroadcastClient(self._zmq, pub, pull, self.rank)
            self._global = Group(self.rank, client)
            client.start(self._timeout)
        self._global.collective_timeout = self._collective_timeout
        self._init_local(force_tcp)

    def _init_local(self, force_tcp: bool) -> None:
        """Local chiefs bind the node channel and share its URLs through a global allgather.
        Every rank takes part (the reference skips it when local_size < 2, which hangs jobs whose
        machines run different numbers of processes)."""
        assert self._zmq is not None and self._global is not None
        server: BroadcastServer | None = None
        mine = None
        if self.local_size >= 2 and self.local_rank == 0:
            pub_url, pull_url = self._local_urls(force_tcp)
            server = BroadcastServer(self._zmq, pub_url, pull_url, range(1, self.local_size))
            self._local = Group(0, server)
            mine = (self.cross_rank, server.pub_url, server.pull_url)
        chiefs = self._global.allgather(mine)
        if self.local_size < 2:
            return
        if server is None:
            found = [c for c in chiefs if c is not None and c[0] == self.cross_rank]
            if len(found) != 1:
                raise RuntimeError(
                    f"expected one local chief for cross_rank {self.cross_rank}, found {found}: "
                    "local_rank/cross_rank are inconsistent across the processes of this job"
                )
            client = BroadcastClient(self._zmq, found[0][1], found[0][2], self.local_rank)
            self._local = Group(self.local_rank, client)
            client.start(self._timeout)
        else:
            server.start(self._timeout)
        self._local.collective_timeout = self._collective_timeout  # type: ignore[union-attr]

    def _local_urls(self, force_tcp: bool) -> tuple[str, str]:
        if not force_tcp and hasattr(socket, "AF_UNIX") and zmq.has("ipc"):
            self._tempdir = tempfile.mkdtemp(prefix="det-ipc-")
            if len(self._tempdir) + len("/pull.sock") <= _MAX_IPC_PATH:
                return f"ipc://{self._tempdir}/pub.sock", f"ipc://{self._tempdir}/pull.sock"
        # Loopback only: the node channel never leaves the machine.
        return "tcp://127.0.0.1:*", "tcp://127.0.0.1:*"

    @classmethod
    def from_horovod(cls, hvd: Any, chief_ip: str | None = None) -> DistributedContext:
        """Build from an initialised horovod module (``hvd.rank()``, ``hvd.local_size()``, ...).
        ``chief_ip`` defaults to ``DET_CHIEF_IP``; it is required when ``hvd.cross_size() > 1``."""
        return cls(
            rank=hvd.rank(),
            size=hvd.size(),
            local_rank=hvd.local_rank(),
            local_size=hvd.local_size(),
            cross_rank=hvd.cross_rank(),
            cross_size=hvd.cross_size(),
            chief_ip=chief_ip or os.environ.get("DET_CHIEF_IP"),
        )

    @classmethod
    def from_deepspeed(cls, chief_ip: str | None = None) -> DistributedContext:
        """Build from ``RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE, CROSS_RANK, CROSS_SIZE``
        (KeyError if one is missing). ``chief_ip`` defaults to ``DET_CHIEF_IP``."""
        return cls._from_env(
            ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE"), chief_ip
        )

    @classmethod
    def from_torch_distributed(cls, chief_ip: str | None = None) -> DistributedContext:
        """Build from torchrun's ``RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
        GROUP_WORLD_SIZE`` (KeyError if one is missing); GROUP_* are the cross rank and size.
        ``chief_ip`` defaults to ``DET_CHIEF_IP``."""
        names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
        return cls._from_env((*names, "GROUP_WORLD_SIZE"), chief_ip)

    @classmethod
    def _from_env(cls, names: tuple[str, ...], chief_ip: str | None) -> DistributedContext:
        r, s, lr, ls, cr, cs = (int(os.environ[name]) for name in names)
        return cls(
            rank=r,
            size=s,
            local_rank=lr,
            local_size=ls,
            cross_rank=cr,
            cross_size=cs,
            chief_ip=chief_ip or os.environ.get("DET_CHIEF_IP"),
        )

    def get_rank(self) -> int:
        """This process's index in the trial (0 is the chief)."""
        return self.rank

    def get_local_rank(self) -> int:
        """This process's index on its machine (0 is the local chief)."""
        return self.local_rank

    def get_size(self) -> int:
        """The number of processes (slots) in the trial."""
        return self.size

    def get_local_size(self) -> int:
        """The number of processes of the trial on this machine."""
        return self.local_size

    def get_cross_rank(self) -> int:
        """The index of this machine among the trial's machines."""
        return self.cross_rank

    def get_cross_size(self) -> int:
        """The number of machines the trial runs on."""
        return self.cross_size

    def get_num_agents(self) -> int:
        """The number of agents (machines) the trial runs on; the same as ``get_cross_size()``."""
        return self.cross_size

    def gather(self, stuff: Any) -> list[Any] | None:
        """Collect ``stuff`` from every rank on the chief. Called by all ranks; blocks until all
        have called it. Returns the values in rank order on the chief and None elsewhere."""
        return self._run(self._global, "gather", stuff, [stuff])

    def allgather(self, stuff: Any) -> list[Any]:
        """Collect ``stuff`` from every rank on every rank, in rank order. Called by all ranks."""
        return self._run(self._global, "allgather", stuff, [stuff])

    def broadcast(self, stuff: Any) -> Any:
        """Return the chief's ``stuff`` on every rank (others' arguments are ignored)."""
        return self._run(self._global, "broadcast", stuff, stuff)

    def gather_local(self, stuff: Any) -> list[Any] | None:
        """Like :meth:`gather`, among this machine's ranks, to the local chief, in local_rank
        order. Called by every rank of this machine."""
        return self._run(self._local, "gather", stuff, [stuff])

    def allgather_local(self, stuff: Any) -> list[Any]:
        """Like :meth:`allgather`, among this machine's ranks, in local_rank order."""
        return self._run(self._local, "allgather", stuff, [stuff])

    def broadcast_local(self, stuff: Any = None) -> Any:
        """Return the local chief's ``stuff`` on every rank of this machine."""
        return self._run(self._local, "broadcast", stuff, stuff)

    def _run(self, group: Group | None, name: str, stuff: Any, alone: Any) -> Any:
        if self._failure is not None:
            raise RuntimeError(f"this DistributedContext failed earlier: {self._failure}")
        if self._closed:
            raise RuntimeError(f"{name}() called after DistributedContext.close()")
        if group is None:
            return alone
        try:
            try:
                return getattr(group, name)(stuff)
            except errors.DistributedTimeout as e:
                raise errors.DistributedTimeout(
                    f"{e}: over collective_timeout={self._collective_timeout:g} s (set by "
                    f"DistributedContext(collective_timeout=...) or {COLLECTIVE_TIMEOUT_ENV})"
                ) from None
        except BaseException as e:
            # Peers cannot be resynchronised after a failed collective: close, so that ranks
            # waiting on this one fail now rather than at their timeout.
            self._failure = f"rank {self.rank} failed in {name}: {type(e).__name__}: {e}"
            for g in (self._local, self._global):
                if g is not None:
                    g.abort(self._failure)
            self.close()
            raise

    def close(self) -> None:
        """Close the sockets and remove the unix-socket directory. Call it on every rank once
        done; it does not wait for other ranks. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for group in (self._local, self._global):
            if group is not None:
                group.endpoint.close()
        if self._zmq is not None:
            self._zmq.term()
        if self._tempdir is not None:
            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None

    def __enter__(self) -> DistributedContext:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.close()


def _validate_ranks(rank: int, size: int, lrank: int, lsize: int, crank: int, csize: int) -> None:
    for name, index, count in (
        ("rank", rank, size),
        ("local_rank", lrank, lsize),
        ("cross_rank", crank, csize),
    ):
        if not 0 <= index < count:
            raise ValueError(f"{name}={index} is outside [0, {count}): check the rank arguments")
    if lsize > size or csize > size:
        raise ValueError(f"local_size={lsize} and cross_size={csize} cannot exceed size={size}")


def _resolve_timeout(value: float | None, env: str, default: float) -> float | None:
    """Seconds, or None for no limit (a value <= 0)."""
    seconds = float(_env_number(env, float, default) if value is None else value)
    return seconds if seconds > 0 else None


def _training_port_offset() -> int:
    info = _info.get_cluster_info()
    if info is not None and info.task_type == "TRIAL":
        return int(info.trial._unique_port_offset)
    return 0


class DummyDistributedContext(DistributedContext):
    """A single-process DistributedContext: rank 0 of 1; every collective is an identity."""

    def __init__(self) -> None:
        super().__init__(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)
