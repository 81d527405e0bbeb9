"""Default experiment names, ``Experiment (<adverb>-<adjective>-<animal>)`` as in the reference
(which uses three petname words). Our own small word lists."""

from __future__ import annotations

import random

_ADVERBS = (
    "briskly", "calmly", "cheerfully", "deeply", "eagerly", "freely", "gently", "happily",
    "keenly", "kindly", "lightly", "neatly", "openly", "proudly", "quickly", "quietly",
    "rarely", "simply", "smoothly", "softly", "steadily", "surely", "swiftly", "warmly",
)  # fmt: skip
_ADJECTIVES = (
    "amber", "bold", "brave", "bright", "clever", "cosmic", "crisp", "curious", "dapper",
    "fair", "fancy", "gentle", "golden", "humble", "jolly", "lucky", "mellow", "nimble",
    "noble", "polite", "rapid", "sunny", "tidy", "vivid", "witty", "zesty",
)  # fmt: skip
_ANIMALS = (
    "badger", "beaver", "bison", "crane", "dingo", "dolphin", "falcon", "ferret", "gecko",
    "heron", "ibex", "jaguar", "koala", "lemur", "lynx", "marmot", "newt", "ocelot", "otter",
    "panda", "puffin", "quokka", "raven", "salmon", "tapir", "walrus", "wombat", "yak",
)  # fmt: skip


def experiment_name(rng: random.Random | None = None) -> str:
    """A fresh default experiment name; not reproducible unless ``rng`` is given."""
    r = rng or random.SystemRandom()
    words = (r.choice(_ADVERBS), r.choice(_ADJECTIVES), r.choice(_ANIMALS))
    return f"Experiment ({'-'.join(words)})"
