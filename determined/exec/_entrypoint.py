"""Find the trial class named by a ``module:Class`` entrypoint in the model directory."""

from __future__ import annotations

import importlib
import os
import sys

import determined as det


def trial_class_from_entrypoint(entrypoint: str, model_dir: str | None = None) -> type:
    """Import ``module`` from ``model_dir`` (default: the working directory, where the master
    unpacks the model definition) and return ``module.Qual.Name``.

    The module is imported afresh even if a module of that name was imported before, so a
    process that loads several model definitions gets each one's own code.

    Raises:
        ValueError: the entrypoint is not ``module:Class``, or the module or name is missing.
        TypeError: the name is not a subclass of ``det.LegacyTrial`` (e.g. PyTorchTrial).
    """
    module_name, sep, qualname = entrypoint.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"entrypoint {entrypoint!r} is not of the form module:Class")
    directory = os.path.abspath(model_dir or os.getcwd())
    if directory not in sys.path:
        sys.path.insert(0, directory)
    for name in [m for m in sys.modules if m == module_name or m.startswith(module_name + ".")]:
        del sys.modules[name]
    try:
        obj: object = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name == module_name:
            fix = f"put {module_name}.py in the model definition directory or fix the entrypoint"
        else:
            fix = (
                f"install {e.name!r} in the trial's environment (pip install in a "
                f"startup-hook.sh) or fix the import in {module_name}"
            )
        raise ValueError(f"entrypoint {entrypoint!r}: {e}; {fix}") from e
    except SyntaxError as e:
        raise ValueError(
            f"entrypoint {entrypoint!r}: {module_name} does not parse: {e.msg} "
            f"({os.path.basename(e.filename or '?')}, line {e.lineno}); fix the syntax error"
        ) from e
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise ValueError(
                f"entrypoint {entrypoint!r}: {module_name} has no {qualname!r}; name a class "
                f"defined in {module_name}.py"
            )
        obj = getattr(obj, part)
    if not isinstance(obj, type) or not issubclass(obj, det.LegacyTrial):
        raise TypeError(
            f"entrypoint {entrypoint!r} names {obj!r}, which is not a trial class: it must "
            "subclass a trial base such as determined.pytorch.PyTorchTrial"
        )
    return obj
