"""``load_trial_from_checkpoint_path``: rebuild a trial from a checkpoint directory for
inference or inspection, outside any training run."""

from __future__ import annotations

import importlib
import json
import pathlib
import sys
import tempfile
from typing import Any

from determined import core
from determined.common import storage
from determined.pytorch import _checkpoint_io, _legacy
from determined.pytorch._context import PyTorchTrialContext
from determined.pytorch._trial import PyTorchTrial


def _dummy_core() -> core.Context:
    dist = core.DummyDistributedContext()
    return core.Context(
        checkpoint=core.DummyCheckpointContext(
            dist, storage.from_init_arg(None, tempfile.gettempdir())
        ),
        distributed=dist,
        preempt=core.DummyPreemptContext(dist),
        train=core.DummyTrainContext(),
        searcher=core.DummySearcherContext(dist),
        profiler=core.DummyProfilerContext(),
        experimental=core.DummyExperimentalCoreContext(),
    )


class CheckpointLoadContext(PyTorchTrialContext):
    """The context a trial gets when rebuilt from a checkpoint: one slot, seed 0, unmanaged
    (``wrap_*`` register but models are neither moved nor wrapped in DDP)."""

    def __init__(
        self, hparams: dict[str, Any] | None = None, exp_conf: dict[str, Any] | None = None
    ) -> None:
        super().__init__(
            _dummy_core(), hparams=hparams, exp_conf=exp_conf, trial_seed=0, managed_training=False
        )
        self._managed = True  # register models/optimizers so their state can be loaded

    def wrap_model(self, model: Any) -> Any:
        self.models.append(model)
        return model


def _read_load_data(path: pathlib.Path) -> dict[str, Any]:
    for name in _legacy.LOAD_DATA_FILES:
        file = path / name
        if file.is_file():
            data = json.loads(file.read_text())
            if name == "load_data.json" or "trial_cls_spec" in data:
                return dict(data)
    raise AssertionError(
        f"{path} has neither load_data.json nor a metadata.json describing the trial; it is "
        "not a PyTorchTrial checkpoint"
    )


def _import_trial_class(path: pathlib.Path, spec: str) -> type[PyTorchTrial]:
    module_name, _, qualname = spec.partition(":")
    if module_name == "__main__" or not module_name:
        raise ValueError(f"trial class {spec!r} cannot be imported from code/: pass trial_class=")
    code = str(path / "code")
    # The package root, and the module's own directory for its top-level sibling imports.
    here = str(path / "code" / module_name.rpartition(".")[0].replace(".", "/"))
    sys.path[:0] = [here, code]
    try:
        sys.modules.pop(module_name, None)
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ValueError(
            f"cannot import trial class {spec!r} from {code}: {e}; pass trial_class= instead"
        ) from e
    finally:
        sys.path.remove(code)
        sys.path.remove(here)
    return obj


def load_trial_from_checkpoint_path(
    path: str | pathlib.Path,
    trial_class: type[PyTorchTrial] | None = None,
    trial_kwargs: dict[str, Any] | None = None,
    torch_load_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> PyTorchTrial:
    """Rebuild the trial saved in checkpoint directory ``path`` and load its model weights.

    The class is ``trial_class``, else imported from ``<path>/code`` by the saved
    ``trial_cls_spec``. Only ``models_state_dict`` is loaded (optimizers are not). Checkpoints
    written by Determined 0.x load too: legacy key names, DDP ``module.`` prefixes, CUDA
    tensors on a CPU-only machine, and numpy RNG state under torch's ``weights_only``.

    Raises:
        AssertionError: ``path`` has no ``load_data.json`` or legacy ``metadata.json``.
        ValueError: the trial class cannot be imported.
    """
    path = pathlib.Path(path)
    data = _read_load_data(path)
    cls = trial_class or _import_trial_class(path, data["trial_cls_spec"])
    context = CheckpointLoadContext(data.get("hparams"), data.get("experiment_config"))
    trial = cls(context, **(trial_kwargs or {}))
    state = _checkpoint_io.load_state(path, **(torch_load_kwargs or {}))
    _checkpoint_io.restore_models(context.models, state)
    return trial
