"""NumPy-compatible MT19937 stream, as the reference master draws it.

Determined's master (Go) reimplements NumPy's legacy ``RandomState``: MT19937 seeded with the
standard ``init_genrand``, bounded integers by mask-and-reject over 32-bit draws, floats from two
32-bit draws. Searches must replay identically from ``experiment_seed``, so every draw here
follows that recipe. The generator itself is CPython's ``random.Random`` (also MT19937, so its
``getrandbits(32)`` is the raw tempered output); we only replace its seeding.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

_N = 624
_MASK32 = 0xFFFFFFFF


def _init_genrand(seed: int) -> list[int]:
    # Knuth's initialiser from the original mt19937ar.c; NumPy and the reference use it too.
    key = [0] * _N
    key[0] = seed & _MASK32
    for i in range(1, _N):
        prev = key[i - 1]
        key[i] = (1812433253 * (prev ^ (prev >> 30)) + i) & _MASK32
    return key


class NpRand:
    """A seeded MT19937 generator with the reference's draw recipes.

    Owned by one search method; it is not thread-safe. ``state()`` is JSON-able and
    ``NpRand.from_state`` continues the stream exactly.
    """

    def __init__(self, seed: int) -> None:
        self._gen = random.Random()
        self._gen.setstate((3, (*_init_genrand(seed), _N), None))

    def bits32(self) -> int:
        """One raw 32-bit output of the twister."""
        return self._gen.getrandbits(32)

    def _bits64(self) -> int:
        upper = self.bits32()
        return (upper << 32) | self.bits32()

    def _bits_limit(self, limit: int) -> int:
        # Smallest all-ones mask covering `limit`, then reject draws above it.
        if limit == 0:
            return 0
        mask = (1 << limit.bit_length()) - 1
        draw = self.bits32 if limit <= _MASK32 else self._bits64
        while True:
            value = draw() & mask
            if value <= limit:
                return value

    def intn(self, n: int) -> int:
        """A uniform integer in ``[0, n)``; ``n`` must be at least 1."""
        if n < 1:
            raise ValueError(f"intn needs n >= 1, got {n}")
        return self._bits_limit(n - 1)

    def unit_interval(self) -> float:
        """A float in ``[0, 1)`` with 53 random bits (NumPy's ``random_sample``)."""
        a = self.bits32() >> 5
        b = self.bits32() >> 6
        return (a * 67108864.0 + b) / 9007199254740992.0

    def uniform(self, low: float, high: float) -> float:
        """``low + (high - low) * u`` for ``u`` in ``[0, 1)``."""
        return low + (high - low) * self.unit_interval()

    def request_id(self) -> str:
        """A UUIDv4 string from 16 bytes (four little-endian 32-bit draws)."""
        raw = bytearray()
        for _ in range(4):
            raw += self.bits32().to_bytes(4, "little")
        raw[6] = (raw[6] & 0x0F) | 0x40
        raw[8] = (raw[8] & 0x3F) | 0x80
        return str(uuid.UUID(bytes=bytes(raw)))

    def trial_seed(self) -> int:
        """A trial seed in ``[0, 2**31)``."""
        return self.intn(1 << 31)

    def state(self) -> dict[str, Any]:
        """The generator state as JSON-able data."""
        _, internal, _ = self._gen.getstate()
        return {"key": list(internal[:_N]), "pos": internal[_N]}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> NpRand:
        """A generator that continues exactly where ``state()`` was taken."""
        key = [int(k) for k in state["key"]]
        if len(key) != _N:
            raise ValueError(f"an MT19937 state has {_N} words, this one has {len(key)}")
        rand = cls(0)
        rand._gen.setstate((3, (*key, int(state["pos"])), None))
        return rand
