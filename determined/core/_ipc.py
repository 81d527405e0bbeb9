"""ZMQ channels behind DistributedContext: one server (a chief) and its clients.

The server binds PUB and PULL; each client connects SUB and PUSH. Clients push their part of a
collective; the server publishes the answer. The handshake is the reference's: the server
publishes HELLO every 50 ms until every client has pushed a HELLO back, then FINAL_HELLO.

Where the reference blocks forever, these raise:

* ``DistributedTimeout`` when the handshake does not complete within its timeout, or a collective
  does not complete within the (optional) collective timeout;
* ``DistributedPeerLost`` when a socket monitor reports that a peer seen during the handshake
  disconnected. A killed process is noticed at once (the kernel closes its sockets); a host that
  vanishes is noticed by ZMTP heartbeats, which libzmq's I/O thread answers without the GIL, so a
  peer busy in Python (say, writing a checkpoint) is never mistaken for a dead one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from determined import errors
from determined.core._ipc_codec import Buffer, Op, decode, encode, message, split

HELLO_INTERVAL_S = 0.05
HEARTBEAT_ENV = "DET_DISTRIBUTED_HEARTBEAT"  # seconds between pings; a peer is dead after 6 missed
DEFAULT_HEARTBEAT_S = 10.0
# How long to look for data a peer sent just before disconnecting: its monitor event can overtake
# the data's arrival notice.
_GRACE_MS = 100
_ABORT_LINGER_MS = 1000
# Below this a copy is cheaper than the zero-copy bookkeeping (pyzmq's own threshold).
_ZERO_COPY_MIN = zmq.COPY_THRESHOLD


_TIMEOUT_HINT = "Wait longer with DistributedContext(timeout=...) or DET_DISTRIBUTED_TIMEOUT."


def _deadline(timeout: float | None) -> float:
    return time.monotonic() + timeout if timeout is not None else float("inf")


def _configure(sock: zmq.Socket) -> None:
    heartbeat_ms = int(float(os.environ.get(HEARTBEAT_ENV, DEFAULT_HEARTBEAT_S)) * 1000)
    sock.setsockopt(zmq.LINGER, 0)
    # Unlimited queues: PUB drops and PUSH blocks at the high-water mark.
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.HEARTBEAT_IVL, heartbeat_ms)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 6 * heartbeat_ms)
    sock.setsockopt(zmq.HEARTBEAT_TTL, 6 * heartbeat_ms)


class _PeerWatch:
    """Follows a socket's connections and notices when one that existed at the end of the
    handshake goes away. Connections made later (a port scanner, say) are ignored."""

    def __init__(self, sock: zmq.Socket) -> None:
        self._target = sock
        events = zmq.EVENT_ACCEPTED | zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED
        self.sock = sock.get_monitor_socket(events)
        self._open: set[int] = set()
        self._peers: set[int] | None = None
        self.lost = False

    def drain(self) -> bool:
        """Read pending events; True once a handshake peer has disconnected."""
        while self.sock.poll(0):
            event = recv_monitor_message(self.sock)
            fd, kind = event["value"], event["event"]
            if kind in (zmq.EVENT_ACCEPTED, zmq.EVENT_CONNECTED):
                if self._peers is None:
                    self._open.add(fd)
            elif kind == zmq.EVENT_DISCONNECTED:
                self._open.discard(fd)
                if self._peers is not None and fd in self._peers:
                    self.lost = True
        return self.lost

    def freeze(self) -> None:
        """The handshake is done: the connections open now are the peers to watch."""
        self.drain()
        self._peers = set(self._open)

    def close(self) -> None:
        try:
            self._target.disable_monitor()
        except zmq.ZMQError:
            pass
        self.sock.close(linger=0)


class _Endpoint:
    """What a server and a client share: a context, the socket to wait on, and its watch."""

    def __init__(self, ctx: zmq.Context, inbound: zmq.Socket, outbound: zmq.Socket) -> None:
        self._ctx = ctx
        self._in = inbound
        self._out = outbound
        self._watch = _PeerWatch(inbound)
        self._poller = zmq.Poller()
        self._poller.register(self._in, zmq.POLLIN)
        self._poller.register(self._watch.sock, zmq.POLLIN)
        self.closed = False

    def _recv(self, deadline: float | None, what: str) -> list[zmq.Frame]:
        """Next message on the inbound socket. Raises DistributedPeerLost when a peer went away
        first and DistributedTimeout at ``deadline`` (a time.monotonic() value)."""
        while True:
            if self._in.poll(0):
                return self._in.recv_multipart(copy=False)
            if self._watch.drain():
                if self._in.poll(_GRACE_MS):
                    return self._in.recv_multipart(copy=False)
                raise errors.DistributedPeerLost(f"a peer disconnected while {what}")
            timeout_ms = None
            if deadline is not None and deadline != float("inf"):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise errors.DistributedTimeout(f"timed out while {what}")
                timeout_ms = max(1, int(left * 1000))
            self._poller.poll(timeout_ms)

    def close(self, linger_ms: int = 0) -> None:
        if self.closed:
            return
        self.closed = True
        self._watch.close()
        self._in.close(linger=0)
        self._out.close(linger=linger_ms)


def _check(op: Op, serial: int, got_op: Op, got_serial: int, sender: int) -> None:
    if got_op != op or got_serial != serial:
        raise RuntimeError(
            f"DistributedContext collectives are out of order: this rank is in "
            f"{op.name.lower()} #{serial} but received {got_op.name.lower()} #{got_serial} "
            f"from rank {sender}. Every rank must call the same collectives in the same order."
        )


class BroadcastServer(_Endpoint):
    """The chief's side: binds PUB and PULL, gathers from ``expected`` client ranks."""

    def __init__(self, ctx: zmq.Context, pub_url: str, pull_url: str, expected: Sequence[int]):
        pub, pull = ctx.socket(zmq.PUB), ctx.socket(zmq.PULL)
        for sock in (pub, pull):
            _configure(sock)
        super().__init__(ctx, inbound=pull, outbound=pub)
        self.expected = sorted(expected)
        try:
            pub.bind(pub_url)
            pull.bind(pull_url)
        except zmq.ZMQError as e:
            self.close()
            raise OSError(
                e.errno,
                f"cannot bind {pub_url} and {pull_url} for DistributedContext: {e}. Another job "
                "may be using these ports; choose others with INTER_TRAIN_PROCESS_COMM_PORT_1/_2.",
            ) from e
        self.pub_url = pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.pull_url = pull.getsockopt_string(zmq.LAST_ENDPOINT)

    def start(self, timeout: float | None) -> None:
        """Handshake; raises DistributedTimeout naming the ranks that never said hello."""
        deadline = _deadline(timeout)
        seen: set[int] = set()
        next_hello = 0.0
        while len(seen) < len(self.expected):
            now = time.monotonic()
            if now >= deadline:
                missing = sorted(set(self.expected) - seen)
                raise errors.DistributedTimeout(
                    f"ranks {missing} did not connect to {self.pull_url} within {timeout:g} s. "
                    f"Check that they started and can reach this machine. {_TIMEOUT_HINT}"
                )
            if now >= next_hello:
                self._out.send_multipart(message(0, Op.HELLO, 0, []))
                next_hello = now + HELLO_INTERVAL_S
            if self._in.poll(max(1, int((min(next_hello, deadline) - now) * 1000))):
                header, _ = split(self._in.recv_multipart(copy=False))
                if header.op == Op.HELLO:
                    seen.add(header.rank)
        self._out.send_multipart(message(0, Op.FINAL_HELLO, 0, []))
        self._watch.freeze()

    def gather(self, serial: int, op: Op, deadline: float | None) -> dict[int, list[Buffer]]:
        """Each client's item for collective ``serial``, by rank."""
        got: dict[int, list[Buffer]] = {}
        while len(got) < len(self.expected):
            missing = sorted(set(self.expected) - set(got))
            what = f"the chief waited in {op.name.lower()} #{serial} for ranks {missing}"
            header, items = split(self._recv(deadline, what))
            _check(op, serial, header.op, header.serial, header.rank)
            got[header.rank] = items[0]
        return got

    def publish(self, serial: int, op: Op, items: Sequence[Sequence[Buffer]]) -> None:
        """Send ``items`` to every client; returns once libzmq no longer needs the buffers, so the
        caller may modify (or return to user code) whatever they point into."""
        frames = message(serial, op, 0, items)
        trackers = []
        for i, frame in enumerate(frames):
            flags = zmq.SNDMORE if i < len(frames) - 1 else 0
            buf = frame.buffer if isinstance(frame, zmq.Frame) else frame
            if len(buf) < _ZERO_COPY_MIN:
                self._out.send(buf, flags, copy=True)
            else:
                trackers.append(self._out.send(buf, flags, copy=False, track=True))
        # A dead subscriber's queue is dropped on disconnect, so this cannot wait forever.
        for tracker in trackers:
            tracker.wait()

    def abort(self, reason: str) -> None:
        """Tell the clients why this collective failed, then close."""
        if self.closed:
            return
        try:
            self._out.send_multipart(message(0, Op.ABORT, 0, [[reason.encode()]]))
        except zmq.ZMQError:
            pass
        self.close(linger_ms=_ABORT_LINGER_MS)


class BroadcastClient(_Endpoint):
    """A worker's side: connects SUB and PUSH to a server."""

    def __init__(self, ctx: zmq.Context, pub_url: str, pull_url: str, rank: int) -> None:
        sub, push = ctx.socket(zmq.SUB), ctx.socket(zmq.PUSH)
        for sock in (sub, push):
            _configure(sock)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        super().__init__(ctx, inbound=sub, outbound=push)
        self.rank = rank
        self.pub_url = pub_url
        sub.connect(pub_url)
        push.connect(pull_url)

    def start(self, timeout: float | None) -> None:
        deadline = _deadline(timeout)
        what = f"rank {self.rank} waited for the chief at {self.pub_url}"
        try:
            self._await_op(Op.HELLO, deadline, what)
        except errors.DistributedTimeout as e:
            raise errors.DistributedTimeout(
                f"{e} for {timeout:g} s: it never answered. Check that rank 0 started and that "
                f"chief_ip (DET_CHIEF_IP) and the ports are right. {_TIMEOUT_HINT}"
            ) from None
        self._out.send_multipart(message(0, Op.HELLO, self.rank, []))
        try:
            self._await_op(Op.FINAL_HELLO, deadline, f"{what} to hear from the other ranks")
        except errors.DistributedTimeout as e:
            raise errors.DistributedTimeout(f"{e} for {timeout:g} s. {_TIMEOUT_HINT}") from None
        self._watch.freeze()

    def _await_op(self, op: Op, deadline: float, what: str) -> None:
        while True:
            header, _ = split(self._recv(deadline, what))
            if header.op == op:
                return

    def send(self, serial: int, op: Op, item: Sequence[Buffer]) -> None:
        self._out.send_multipart(message(serial, op, self.rank, [item]), copy=False)

    def recv(self, serial: int, op: Op, deadline: float | None) -> list[list[Buffer]]:
        """The server's answer to collective ``serial``; raises DistributedPeerLost if the server
        aborted or went away."""
        what = f"rank {self.rank} waited for the chief in {op.name.lower()} #{serial}"
        header, items = split(self._recv(deadline, what))
        if header.op == Op.ABORT:
            reason = bytes(
                items[0][0].buffer if isinstance(items[0][0], zmq.Frame) else items[0][0]
            )
            raise errors.DistributedPeerLost(f"the chief aborted: {reason.decode()}")
        _check(op, serial, header.op, header.serial, header.rank)
        return items


class Group:
    """The collectives of one channel (all ranks, or one node's ranks) as seen by one rank.
    The server is the channel's chief; a client is any other member."""

    def __init__(self, rank: int, endpoint: BroadcastServer | BroadcastClient) -> None:
        self.rank = rank
        self.endpoint = endpoint
        self.collective_timeout: float | None = None
        self._serial = 0

    def _next(self) -> tuple[int, float | None]:
        self._serial += 1
        limit = self.collective_timeout
        return self._serial, None if limit is None else time.monotonic() + limit

    def gather(self, stuff: Any) -> list[Any] | None:
        serial, deadline = self._next()
        ep = self.endpoint
        if isinstance(ep, BroadcastServer):
            got = ep.gather(serial, Op.GATHER, deadline)
            ep.publish(serial, Op.GATHER, [])  # keeps clients in lock-step
            return [stuff, *(decode(got[r]) for r in sorted(got))]
        ep.send(serial, Op.GATHER, encode(stuff))
        ep.recv(serial, Op.GATHER, deadline)
        return None

    def allgather(self, stuff: Any) -> list[Any]:
        serial, deadline = self._next()
        ep = self.endpoint
        if isinstance(ep, BroadcastServer):
            got = ep.gather(serial, Op.ALLGATHER, deadline)
            # Forward what the clients sent as-is rather than unpickling and pickling it again.
            ep.publish(serial, Op.ALLGATHER, [encode(stuff), *(got[r] for r in sorted(got))])
            return [stuff, *(decode(got[r]) for r in sorted(got))]
        ep.send(serial, Op.ALLGATHER, encode(stuff))
        items = ep.recv(serial, Op.ALLGATHER, deadline)
        return [stuff if i == self.rank else decode(item) for i, item in enumerate(items)]

    def broadcast(self, stuff: Any) -> Any:
        serial, deadline = self._next()
        ep = self.endpoint
        if isinstance(ep, BroadcastServer):
            ep.publish(serial, Op.BROADCAST, [encode(stuff)])
            return stuff
        return decode(ep.recv(serial, Op.BROADCAST, deadline)[0])

    def abort(self, reason: str) -> None:
        if isinstance(self.endpoint, BroadcastServer):
            self.endpoint.abort(reason)
        else:
            self.endpoint.close()
