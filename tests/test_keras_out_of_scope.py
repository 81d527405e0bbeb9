"""determined.keras: TensorFlow and Keras are out of scope (docs/reference/compatibility.md);
importing it says so and names what to use instead."""

from __future__ import annotations

import importlib
import sys

import pytest


def test_importing_keras_raises_an_import_error_pointing_to_pytorch_trial() -> None:
    sys.modules.pop("determined.keras", None)
    with pytest.raises(ImportError) as e:
        importlib.import_module("determined.keras")
    message = str(e.value)
    assert "out of scope" in message and "TensorFlow" in message
    assert "determined.pytorch.PyTorchTrial" in message
    assert "determined.keras" not in sys.modules


def test_from_determined_import_keras_fails_the_same_way() -> None:
    with pytest.raises(ImportError, match="PyTorchTrial"):
        from determined import keras  # noqa: F401
