"""Synthetic MNIST-like digits, made deterministically (no download).

Each image is a 28x28 seven-segment digit drawn with a random position, size, slant, stroke
width and brightness, plus pixel noise. A seeded numpy Generator makes the same images on
every run, on every rank.
"""

from __future__ import annotations

import numpy as np
import torch

# Segments of a seven-segment display, as (x0, y0, x1, y1) in a unit box (y grows downwards).
_SEGMENTS = {
    "a": (0, 0, 1, 0),
    "b": (1, 0, 1, 0.5),
    "c": (1, 0.5, 1, 1),
    "d": (0, 1, 1, 1),
    "e": (0, 0.5, 0, 1),
    "f": (0, 0, 0, 0.5),
    "g": (0, 0.5, 1, 0.5),
}
_DIGITS = ["abcdef", "bc", "abged", "abgcd", "fgbc", "afgcd", "afgedc", "abc", "abcdefg", "abfgcd"]


def _draw(digit: int, rng: np.random.Generator) -> np.ndarray:
    image = np.zeros((28, 28), dtype=np.float32)
    width, height = rng.uniform(7, 13), rng.uniform(13, 19)
    left = rng.uniform(3, 25 - width)
    top = rng.uniform(3, 25 - height)
    slant = rng.uniform(-0.25, 0.25)
    thick = int(rng.integers(1, 3))
    brightness = rng.uniform(0.6, 1.0)
    t = np.linspace(0.0, 1.0, 24)
    for name in _DIGITS[digit]:
        x0, y0, x1, y1 = _SEGMENTS[name]
        ys = top + height * (y0 + (y1 - y0) * t)
        xs = left + width * (x0 + (x1 - x0) * t) + slant * (ys - 14)
        for d in range(thick):
            r = np.clip(np.round(ys).astype(int) + d, 0, 27)
            c = np.clip(np.round(xs).astype(int) + d, 0, 27)
            image[r, c] = brightness
    image += rng.normal(0.0, 0.15, size=image.shape).astype(np.float32)
    return image


def make_digits(n: int, seed: int) -> torch.utils.data.TensorDataset:
    """``n`` (image [1, 28, 28], label) pairs, normalised to mean 0, std ~1."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n)
    images = np.stack([_draw(int(d), rng) for d in labels])
    images = (images - 0.1) / 0.3
    return torch.utils.data.TensorDataset(
        torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels).long()
    )
