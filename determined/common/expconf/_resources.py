"""Where a trial runs: ``resources``, ``environment`` and ``bind_mounts``.

The container-only parts of ``environment`` (image, ports, pod_spec, capabilities, registry
auth) are accepted and kept so that 0.37 configs parse unchanged; the local resource manager
reads only ``environment_variables``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from determined.common.expconf._base import Section

_SHM_RE = re.compile(r"^([0-9]*[.])?[0-9]+ ?(([kmgtpKMGTP]([iI]?[bB])?)|[bB])?$")


def _omit_none(value: Any) -> bool:
    return value is None


class Device(Section):
    """A device to expose to the trial (``host:container[:mode]`` or the object form)."""

    host_path: str
    container_path: str
    mode: str = "mrw"

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        if isinstance(data, str):
            fields = data.split(":")
            if not 2 <= len(fields) <= 3:
                raise ValueError(f"invalid device string {data!r}; use host:container[:mode]")
            out = {"host_path": fields[0], "container_path": fields[1]}
            return {**out, "mode": fields[2]} if len(fields) == 3 else out
        return data


class ResourcesConfig(Section):
    """``resources``: slots per trial (GPUs, or CPU slots without GPUs) and scheduling hints."""

    slots_per_trial: int = Field(default=1, ge=0)
    max_slots: int | None = Field(default=None, ge=0)
    weight: float = Field(default=1.0, ge=0)
    native_parallel: bool = False
    shm_size: int | str | None = None
    resource_pool: str = ""
    priority: int | None = Field(default=None, ge=1, le=99)
    is_single_node: bool | None = None
    devices: list[Device] = Field(default_factory=list)
    agent_label: str | None = Field(default=None, exclude_if=_omit_none)  # ignored, as in 0.37
    # For commands; the master refuses it in a user's experiment config but keeps one that a
    # template brings, as 0.37 does (trials use slots_per_trial).
    slots: int | None = Field(default=None, exclude_if=_omit_none)

    @field_validator("shm_size")
    @classmethod
    def _shm(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, str) and not _SHM_RE.match(value):
            raise ValueError(f"must be a valid memory size such as 4G or 512M (got {value!r})")
        return value


_DEVICE_KINDS = ("cpu", "cuda", "rocm")


def _per_device(data: Any) -> Any:
    if isinstance(data, dict) and "gpu" in data and "cuda" not in data:
        data = {k: v for k, v in data.items() if k != "gpu"} | {"cuda": data["gpu"]}
    return data


class EnvironmentImage(Section):
    """``environment.image``: a string (every device kind) or ``{cpu, cuda, rocm}``."""

    cpu: str | None = Field(default=None, exclude_if=_omit_none)
    cuda: str | None = Field(default=None, exclude_if=_omit_none)
    rocm: str | None = Field(default=None, exclude_if=_omit_none)

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        if isinstance(data, str):
            return dict.fromkeys(_DEVICE_KINDS, data)
        return _per_device(data)


def environment_dict(items: Iterable[object]) -> dict[str, str]:
    """``KEY=VALUE`` entries as a mapping (``KEY`` alone maps to ``""``; a later entry wins):
    what a process started with them sees. Experiments' (through
    :meth:`EnvironmentVariables.as_dict`) and tasks' environment variables both go through it."""
    out: dict[str, str] = {}
    for item in items:
        key, _, value = str(item).partition("=")
        out[key] = value
    return out


class EnvironmentVariables(Section):
    """``environment.environment_variables``: a list of ``KEY=VALUE`` (every device kind) or
    ``{cpu: [...], cuda: [...], rocm: [...]}``."""

    cpu: list[str] = Field(default_factory=list)
    cuda: list[str] = Field(default_factory=list)
    rocm: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        if isinstance(data, list):
            return {kind: list(data) for kind in _DEVICE_KINDS}
        return _per_device(data)

    @field_validator("cpu", "cuda", "rocm")
    @classmethod
    def _settable(cls, items: list[str]) -> list[str]:
        # A process environment cannot hold these: the launch would fail long after create.
        for item in items:
            key = item.partition("=")[0]
            if not key:
                raise ValueError(f"{item!r} has no variable name; write KEY=VALUE")
            if "\0" in item:
                raise ValueError(f"{key!r} contains a NUL byte, which no environment can hold")
        return items

    def as_dict(self, kind: Literal["cpu", "cuda", "rocm"] = "cpu") -> dict[str, str]:
        """The variables for one device kind as a mapping (``KEY`` alone maps to ``""``)."""
        return environment_dict(getattr(self, kind))


class EnvironmentConfig(Section):
    """``environment``: the trial's environment variables, plus container settings kept for
    compatibility."""

    image: EnvironmentImage = Field(default_factory=EnvironmentImage)
    environment_variables: EnvironmentVariables = Field(default_factory=EnvironmentVariables)
    ports: dict[str, int] = Field(default_factory=dict)
    proxy_ports: list[dict[str, Any]] = Field(default_factory=list)
    registry_auth: dict[str, Any] | None = None
    force_pull_image: bool = False
    pod_spec: dict[str, Any] | None = None
    add_capabilities: list[str] = Field(default_factory=list)
    drop_capabilities: list[str] = Field(default_factory=list)
    slurm: Any = Field(default=None, exclude_if=_omit_none)
    pbs: Any = Field(default=None, exclude_if=_omit_none)


class BindMount(Section):
    """One ``bind_mounts`` entry: ``host_path`` (absolute) reached at ``container_path``."""

    host_path: str
    container_path: str
    read_only: bool = False
    propagation: str = "rprivate"

    @model_validator(mode="after")
    def _paths(self) -> BindMount:
        if not self.host_path.startswith("/"):
            raise ValueError(f"host_path must be an absolute path (got {self.host_path!r})")
        if self.container_path == ".":
            raise ValueError('container_path must not be "."')
        return self
