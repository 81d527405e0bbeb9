"""The package's public names are exactly its ``__all__``, all importable."""

from __future__ import annotations

from determined.common import expconf


def test_all_names_importable_and_public() -> None:
    for name in expconf.__all__:
        assert not name.startswith("_")
        assert getattr(expconf, name) is not None
    public = {n for n in dir(expconf) if not n.startswith("_") and n != "annotations"}
    assert public == set(expconf.__all__)


def test_error_is_the_named_error_from_determined_errors() -> None:
    import determined.errors

    assert expconf.InvalidExperimentConfig is determined.errors.InvalidExperimentConfig
    assert issubclass(expconf.InvalidExperimentConfig, ValueError)
