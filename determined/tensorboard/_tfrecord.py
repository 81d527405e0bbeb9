"""TFRecord framing for event files, fast enough to write every batch's metrics.

A record is ``len (uint64 LE) | masked crc32c(len) | data | masked crc32c(data)``. The
``tensorboard`` package computes CRC32C in pure Python, about 8 us per small event, which is a
visible share of a small model's batch when AUTO mode writes one event per batch metric. Here
the CRCs of all records of one flush are computed together with numpy, from a table of what
each byte at each position contributes (records of one length share it).
"""

from __future__ import annotations

import functools
import struct
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected


def _table() -> np.ndarray:
    """CRC-32C of every byte, from a zero register (one byte per step)."""
    crc = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        crc = np.where(crc & 1, (crc >> 1) ^ np.uint32(_POLY), crc >> 1).astype(np.uint32)
    return crc


_TABLE = _table()


def _zero_step(register: np.ndarray) -> np.ndarray:
    return np.asarray(_TABLE[register & 0xFF] ^ (register >> 8), dtype=np.uint32)


@functools.lru_cache(maxsize=256)
def _by_position(length: int) -> tuple[np.ndarray, int]:
    """For messages of ``length`` bytes: ``table[p, b]``, what byte ``b`` at position ``p``
    contributes to the CRC, and the constant the initial register and final xor contribute.

    A CRC is affine over GF(2): ``crc(m) = xor_p table[p, m[p]] ^ constant``, so the CRCs of
    a whole report's records (equal lengths, as a report's events mostly are) are one gather
    and one xor-reduce, instead of one numpy step per byte."""
    table = np.zeros((length, 256), dtype=np.uint32)
    contribution = _TABLE.copy()  # a byte in the last position: one table step
    for p in range(length - 1, -1, -1):
        table[p] = contribution
        contribution = _zero_step(contribution)  # one zero byte after it
    register = np.array([0xFFFFFFFF], dtype=np.uint32)
    for _ in range(length):
        register = _zero_step(register)
    return table, int(register[0]) ^ 0xFFFFFFFF


def _crc_rows(rows: np.ndarray) -> np.ndarray:
    """The CRC-32C of each row of a ``(records, length)`` uint8 array, as uint32."""
    length = rows.shape[1]
    table, constant = _by_position(length)
    return np.bitwise_xor.reduce(table[np.arange(length), rows], axis=1) ^ np.uint32(constant)


def crc32c_many(items: list[bytes]) -> list[int]:
    """The CRC-32C of each of ``items``."""
    out = [0] * len(items)
    by_length: dict[int, list[int]] = defaultdict(list)
    for i, item in enumerate(items):
        by_length[len(item)].append(i)
    for length, idx in by_length.items():
        if length == 0:
            continue  # the CRC of nothing is 0
        rows = np.frombuffer(b"".join([items[i] for i in idx]), dtype=np.uint8)
        crcs = _crc_rows(rows.reshape(len(idx), length))
        for k, value in zip(idx, crcs.tolist(), strict=True):
            out[k] = value
    return out


def mask(crc: int) -> int:
    """TFRecord's masked CRC: rotate right by 15 and add a constant."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _mask_array(crcs: np.ndarray) -> np.ndarray:
    """:func:`mask` of each uint32 in ``crcs`` (uint32 arithmetic wraps, as the & does)."""
    return ((crcs >> np.uint32(15)) | (crcs << np.uint32(17))) + np.uint32(0xA282EAD8)


_header_cache: dict[int, bytes] = {}


def _header(length: int) -> bytes:
    header = _header_cache.get(length)
    if header is None:
        raw = struct.pack("<Q", length)
        header = raw + struct.pack("<I", mask(crc32c_many([raw])[0]))
        if len(_header_cache) < 4096:
            _header_cache[length] = header
    return header


def frame(records: list[bytes]) -> bytes:
    """``records`` as TFRecord bytes, ready to append to a file."""
    crcs = crc32c_many(records)
    parts: list[bytes] = []
    for data, crc in zip(records, crcs, strict=True):
        parts += (_header(len(data)), data, struct.pack("<I", mask(crc)))
    return b"".join(parts)


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64: negative numbers take ten bytes, as protobuf writes them
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _float32(value: float) -> bytes:
    try:
        return struct.pack("<f", value)
    except OverflowError:  # beyond float32's range: protobuf stores an infinity
        return struct.pack("<f", float("inf") if value > 0 else float("-inf"))


_summary_cache: dict[str, bytes] = {}
_small_varints = [bytes((i,)) for i in range(128)]
_wall_time = struct.Struct("<Bd")


def _summary_prefix(tag: str) -> bytes:
    """Everything of an event after its step and before the float: the summary field with
    its one value, whose tag is fixed (``len`` of the value message is len(tag field) + 5)."""
    prefix = _summary_cache.get(tag)
    if prefix is None:
        raw = tag.encode()
        field = b"\x0a" + _varint(len(raw)) + raw  # Value.tag = 1
        value_len = len(field) + 5  # + Value.simple_value = 2: tag byte and a float32
        summary_len = 1 + len(_varint(value_len)) + value_len
        prefix = b"\x2a" + _varint(summary_len) + b"\x0a" + _varint(value_len) + field + b"\x15"
        if len(_summary_cache) < 4096:
            _summary_cache[tag] = prefix
    return prefix


def scalar_event(tag: str, value: float, step: int, wall_time: float) -> bytes:
    """A serialized ``Event(wall_time, step, summary=Summary(value=[Value(tag, simple_value)]))``,
    encoded directly (the protobuf classes cost ~3 us an event, this under 1 us). Fields:
    Event 1 wall_time (double), 2 step (int64), 5 summary; Summary 1 value; Value 1 tag, 2
    simple_value (float)."""
    step_bytes = _small_varints[step] if 0 <= step < 128 else _varint(step)
    return (
        _wall_time.pack(0x09, wall_time)  # Event.wall_time = 1 (double)
        + b"\x10"  # Event.step = 2 (varint)
        + step_bytes
        + _summary_prefix(tag)
        + _float32(value)
    )


def file_version_event(wall_time: float) -> bytes:
    """A serialized ``Event(wall_time, file_version="brain.Event:2")``: every event file's first
    record. Encoded directly, so writing needs no tensorboard import (~0.2 s)."""
    version = b"brain.Event:2"
    return b"\x09" + struct.pack("<d", wall_time) + b"\x1a" + _varint(len(version)) + version


def _varint_length(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def scalar_series(
    tag: str,
    values: Sequence[int | float | np.number],
    steps: Sequence[int],
    wall_time: float | Sequence[float],
) -> bytes:
    """``frame([scalar_event(tag, v, s, w) for v, s, w in zip(values, steps, wall times)])``
    (``wall_time``: one for all, or one per value), built as arrays: a second of per-batch
    metrics of one tag costs well under a microsecond a value, where encoding, CRC and framing
    in Python cost a few."""
    walls = np.broadcast_to(np.asarray(wall_time, dtype="<f8"), (len(values),))
    if len(values) != len(steps) or len(walls) != len(steps):
        raise ValueError(f"{len(values)} values, {len(steps)} steps and {len(walls)} wall times")
    if not steps:
        return b""
    step_array = np.asarray(steps, dtype=np.int64)
    if int(step_array.min()) < 0:  # ten-byte varints: rare enough for the one-by-one path
        return frame(
            [
                scalar_event(tag, float(v), int(s), float(w))
                for v, s, w in zip(values, steps, walls.tolist(), strict=True)
            ]
        )
    with np.errstate(over="ignore"):  # beyond float32's range gives an infinity, as _float32
        floats = np.asarray(values, dtype=np.float64).astype("<f4")
    prefix = 10  # Event.wall_time = 1 (tag byte, double), then Event.step = 2's tag byte
    summary = np.frombuffer(_summary_prefix(tag), dtype=np.uint8)
    # Records differ in length only by the step's varint: encode each varint length together.
    low, high = _varint_length(int(step_array.min())), _varint_length(int(step_array.max()))
    if low == high:
        lengths = np.full(len(step_array), low)
    else:  # bytes of each varint: one more for every 7 bits past the first 7
        lengths = 1 + np.sum([step_array >> (7 * i) > 0 for i in range(1, 10)], axis=0)
    framed: list[tuple[np.ndarray, np.ndarray]] = []
    for width in range(low, high + 1):
        idx = np.flatnonzero(lengths == width)
        if not len(idx):
            continue
        n, length = len(idx), prefix + width + len(summary) + 4
        rows = np.empty((n, length), dtype=np.uint8)
        rows[:, 0] = 0x09
        rows[:, 1:9] = np.ascontiguousarray(walls[idx]).view(np.uint8).reshape(n, 8)
        rows[:, 9] = 0x10
        group_steps = step_array[idx]
        for i in range(width):
            byte = (group_steps >> (7 * i)) & 0x7F
            rows[:, prefix + i] = byte | 0x80 if i < width - 1 else byte
        rows[:, prefix + width : length - 4] = summary
        rows[:, length - 4 :] = floats[idx].view(np.uint8).reshape(n, 4)
        out = np.empty((n, 12 + length + 4), dtype=np.uint8)
        out[:, :12] = np.frombuffer(_header(length), dtype=np.uint8)
        out[:, 12 : 12 + length] = rows
        out[:, 12 + length :] = (
            _mask_array(_crc_rows(rows)).astype("<u4").view(np.uint8).reshape(n, 4)
        )
        framed.append((idx, out))
    if len(framed) == 1:
        return framed[0][1].tobytes()
    parts: list[bytes] = [b""] * len(step_array)  # back into the order of ``steps``
    for idx, out in framed:
        for i, row in zip(idx.tolist(), out, strict=True):
            parts[i] = row.tobytes()
    return b"".join(parts)
