"""A tiny model for the Core API tutorials: fit y = 3x + 1 with plain numpy SGD.

Kept free of any framework so that the tutorials show only the Core API calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class LinearModel:
    def __init__(self, lr: float = 0.05, seed: int = 0) -> None:
        self.lr = lr
        self.rng = np.random.default_rng(seed)
        self.w = 0.0
        self.b = 0.0

    def _batch(self, n: int = 32) -> tuple[np.ndarray, np.ndarray]:
        x = self.rng.uniform(-1, 1, n)
        return x, 3 * x + 1 + self.rng.normal(0, 0.1, n)

    def train_batch(self) -> float:
        x, y = self._batch()
        err = self.w * x + self.b - y
        self.w -= self.lr * float(np.mean(2 * err * x))
        self.b -= self.lr * float(np.mean(2 * err))
        return float(np.mean(err**2))

    def validate(self) -> float:
        x = np.linspace(-1, 1, 101)
        return float(np.mean((self.w * x + self.b - (3 * x + 1)) ** 2))

    def state(self) -> dict[str, Any]:
        # The data RNG is part of the state: a resumed run then draws the same batches as one
        # that was never stopped.
        return {"w": self.w, "b": self.b, "rng": self.rng.bit_generator.state}

    def load_state(self, state: dict[str, Any]) -> None:
        self.w, self.b = float(state["w"]), float(state["b"])
        if "rng" in state:
            self.rng.bit_generator.state = state["rng"]
