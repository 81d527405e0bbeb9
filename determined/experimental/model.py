"""``determined.experimental.model``, as 0.37 names it: the model registry classes."""

from determined.experimental._sdk._enums import ModelOrderBy, ModelSortBy
from determined.experimental._sdk._model import Model, ModelVersion

__all__ = ["Model", "ModelOrderBy", "ModelSortBy", "ModelVersion"]
