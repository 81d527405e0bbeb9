"""A few KB of English-like text, generated deterministically from a tiny grammar (no download).

The sentences repeat their structure but not their words, so a character model can learn
spelling, spacing and some grammar, and its validation loss (on text from another seed) drops
well below that of a uniform guess.
"""

from __future__ import annotations

import random

import torch

_NOUNS = ["cat", "dog", "bird", "child", "farmer", "teacher", "river", "garden", "house", "ship"]
_VERBS = ["sees", "likes", "finds", "follows", "paints", "builds", "watches", "carries"]
_ADJECTIVES = ["small", "quiet", "green", "old", "bright", "heavy", "happy", "distant"]
_PLACES = ["near the hill", "by the sea", "in the town", "under the tree", "at night"]


def _sentence(rng: random.Random) -> str:
    subject = f"the {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}"
    obj = f"a {rng.choice(_NOUNS)}"
    words = f"{subject} {rng.choice(_VERBS)} {obj}"
    if rng.random() < 0.5:
        words += f" {rng.choice(_PLACES)}"
    return words.capitalize() + "."


def make_text(chars: int, seed: int) -> str:
    """At least ``chars`` characters of sentences, the same for the same seed."""
    rng = random.Random(seed)
    parts: list[str] = []
    total = 0
    while total < chars:
        parts.append(_sentence(rng))
        total += len(parts[-1]) + 1
    return " ".join(parts)


# Every character the grammar can produce, so train and validation share one vocabulary.
VOCAB = sorted(set(" ." + "".join(_NOUNS + _VERBS + _ADJECTIVES + _PLACES)) | {"T", "A"})


def encode(text: str) -> torch.Tensor:
    index = {c: i for i, c in enumerate(VOCAB)}
    return torch.tensor([index[c] for c in text], dtype=torch.long)


class Windows(torch.utils.data.Dataset):
    """Item ``i``: ``(chars[i*stride : i*stride+length], the same shifted by one)``."""

    def __init__(self, ids: torch.Tensor, length: int, stride: int) -> None:
        self.ids, self.length, self.stride = ids, length, stride

    def __len__(self) -> int:
        return (len(self.ids) - self.length - 1) // self.stride + 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = i * self.stride
        chunk = self.ids[start : start + self.length + 1]
        return chunk[:-1], chunk[1:]
