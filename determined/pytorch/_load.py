"""``load_trial_from_checkpoint_path``: rebuild a trial from a checkpoint directory for
inference or inspection, outside any training run."""

from __future__ import annotations

import importlib
import json
import pathlib
import sys
import tempfile
import warnings
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


def _read_load_data(path: pathlib.Path) -> tuple[dict[str, Any], bool]:
    """The checkpoint's load data, and whether it came from a pre-0.17.7 ``metadata.json``."""
    if (path / "load_data.json").is_file():
        return dict(json.loads((path / "load_data.json").read_text())), False
    if (path / "metadata.json").is_file():
        metadata = json.loads((path / "metadata.json").read_text())
        data = _legacy.load_data_from_metadata(metadata)
        if data is not None:
            return data, data is not metadata
    raise AssertionError(
        f"{path} has neither load_data.json nor a metadata.json naming the trial (checkpoints "
        "of Determined 0.17.7 and earlier get one from Checkpoint.download()); it is not a "
        "PyTorchTrial checkpoint"
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
    ``trial_cls_spec`` (``load_data.json``), or by ``experiment_config.entrypoint`` in the
    ``metadata.json`` of checkpoints written by Determined 0.13.x-0.17.6. Only the models'
    weights are loaded (optimizers are not). Checkpoints written by Determined 0.x load too:
    legacy key names, DDP ``module.`` prefixes, CUDA tensors on a CPU-only machine, and numpy
    RNG state (numpy 1 or 2) under torch's ``weights_only``. A pre-0.13 trial that defines
    ``build_model()`` gives back the bare model, as in 0.37. ``**kwargs`` is the deprecated
    spelling of ``torch_load_kwargs``.

    Raises:
        AssertionError: ``path`` has no ``load_data.json`` or legacy ``metadata.json``.
        ValueError: the trial class cannot be imported, or both ``kwargs`` and
            ``torch_load_kwargs`` are given.
    """
    if kwargs:
        if torch_load_kwargs:
            raise ValueError(
                "pass torch.load arguments as torch_load_kwargs only, not also **kwargs"
            )
        warnings.warn(
            "load_trial_from_checkpoint_path(**kwargs) is deprecated: pass "
            "torch_load_kwargs={...} instead",
            FutureWarning,
            stacklevel=2,
        )
        torch_load_kwargs = kwargs
    path = pathlib.Path(path)
    data, before_0_17_7 = _read_load_data(path)
    cls = trial_class or _import_trial_class(path, data["trial_cls_spec"])
    context = CheckpointLoadContext(data.get("hparams"), data.get("experiment_config"))
    trial = cls(context, **(trial_kwargs or {}))
    state = _checkpoint_io.load_state(path, **(torch_load_kwargs or {}))
    if before_0_17_7:
        model = _legacy.model_from_build_model(trial, state)
        if model is not None:
            return model  # type: ignore[return-value]
    _checkpoint_io.restore_models(context.models, state)
    return trial
