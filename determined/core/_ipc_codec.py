"""Wire format of the DistributedContext channels.

A message is a list of ZMQ frames::

    [header, item_0 frames..., item_1 frames..., ...]

The header holds the serial number, the operation, the sender's rank and, for each item, how many
frames it spans. An item is a protocol-5 pickle followed by its out-of-band buffers, so numpy
arrays and bytearrays travel without being copied into the pickle. The chief forwards the frames
it gathered untouched when it answers an allgather, instead of unpickling and pickling them again.
"""

from __future__ import annotations

import enum
import pickle
import struct
from collections.abc import Sequence
from typing import Any, Union

import zmq

# What a frame may be on the way out (bytes, memoryview, zmq.Frame) and on the way in.
Buffer = Union[bytes, memoryview, zmq.Frame]

_HEAD = struct.Struct("!QBiI")  # serial, op, rank, number of items


class Op(enum.IntEnum):
    """The kind of a message; a collective's reply carries the same op as its request so that a
    rank that called a different collective than its peers fails loudly instead of misreading."""

    HELLO = 1
    FINAL_HELLO = 2
    GATHER = 3
    ALLGATHER = 4
    BROADCAST = 5
    ABORT = 6


class Header:
    __slots__ = ("serial", "op", "rank", "counts")

    def __init__(self, serial: int, op: Op, rank: int, counts: Sequence[int]) -> None:
        self.serial = serial
        self.op = op
        self.rank = rank
        self.counts = list(counts)

    def pack(self) -> bytes:
        n = len(self.counts)
        return _HEAD.pack(self.serial, self.op, self.rank, n) + struct.pack(f"!{n}I", *self.counts)

    @classmethod
    def unpack(cls, data: Buffer) -> Header:
        raw = bytes(data.buffer if isinstance(data, zmq.Frame) else data)
        serial, op, rank, n = _HEAD.unpack_from(raw)
        counts = struct.unpack_from(f"!{n}I", raw, _HEAD.size)
        return cls(serial, Op(op), rank, counts)


def encode(obj: Any) -> list[Buffer]:
    """Pickle ``obj`` into frames: the pickle, then each out-of-band buffer as a zero-copy view."""
    oob: list[pickle.PickleBuffer] = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=oob.append)
    frames: list[Buffer] = [data]
    for buf in oob:
        try:
            frames.append(buf.raw())
        except BufferError:  # not contiguous: this one has to be copied
            frames.append(bytes(buf))
    return frames


def decode(frames: Sequence[Buffer]) -> Any:
    """Inverse of :func:`encode`; out-of-band buffers become writable views of the frames."""
    views = [f.buffer if isinstance(f, zmq.Frame) else f for f in frames]
    return pickle.loads(views[0], buffers=views[1:])


def message(serial: int, op: Op, rank: int, items: Sequence[Sequence[Buffer]]) -> list[Buffer]:
    """Frames of one message carrying ``items`` (each the output of :func:`encode`)."""
    header = Header(serial, op, rank, [len(item) for item in items])
    out: list[Buffer] = [header.pack()]
    for item in items:
        out.extend(item)
    return out


def split(frames: Sequence[Buffer]) -> tuple[Header, list[list[Buffer]]]:
    """Inverse of :func:`message`: the header and the frames of each item."""
    header = Header.unpack(frames[0])
    items: list[list[Buffer]] = []
    pos = 1
    for count in header.counts:
        items.append(list(frames[pos : pos + count]))
        pos += count
    if pos != len(frames):
        raise RuntimeError(
            f"malformed DistributedContext message: header announces {pos} frames, got "
            f"{len(frames)}; is another program sending to this port?"
        )
    return header, items
