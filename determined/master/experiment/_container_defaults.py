"""0.37's ``task_container_defaults``: what the master config gives every task and trial (its
top level) and those of one resource pool (``resource_pools[].task_container_defaults``, which
win over the master's), laid under each config when it is created, and a startup hook run
before each process (docs/master.md, "Running it").

Applied here: ``environment_variables`` (the defaults' first, so the config's own win),
``bind_mounts`` (the config's win for a container path), ``image``, ``registry_auth``,
``force_pull_image``, ``add_capabilities``, ``drop_capabilities``, ``log_policies`` and
``preemption_timeout`` where the config sets none, and ``startup_hook`` (a shell command run in
the task's sandbox before its own ``startup-hook.sh``). The container-runtime ones (pod specs,
``shm_size_bytes``, ``network_mode``, ``devices``, ``work_dir``, port ranges, ``slurm``,
``pbs``, ``kubernetes``) are accepted and have no effect: tasks here are processes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

APPLIED = (
    "environment_variables",
    "startup_hook",
    "bind_mounts",
    "image",
    "registry_auth",
    "force_pull_image",
    "add_capabilities",
    "drop_capabilities",
    "log_policies",
    "preemption_timeout",
)
INERT = (
    "dtrain_network_interface",
    "nccl_port_range",
    "gloo_port_range",
    "shm_size_bytes",
    "network_mode",
    "cpu_pod_spec",
    "gpu_pod_spec",
    "checkpoint_gc_pod_spec",
    "devices",
    "work_dir",
    "slurm",
    "pbs",
    "kubernetes",
)
_ENVIRONMENT_KEYS = ("image", "registry_auth", "force_pull_image", "add_capabilities",
                     "drop_capabilities")  # fmt: skip
_ACCELERATORS = ("cpu", "cuda", "rocm")
DEFAULT_POOL = "default"
_POOL_KEYS = ("pool_name", "description", "task_container_defaults")


class ContainerDefaultsError(ValueError):
    """A ``task_container_defaults`` or ``resource_pools`` section that cannot be used."""


def _check(section: Any, where: str) -> dict[str, Any]:
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        raise ContainerDefaultsError(f"{where} must be a mapping of settings")
    unknown = sorted(str(k) for k in section if k not in APPLIED + INERT)
    if unknown:
        raise ContainerDefaultsError(
            f"{where}: unknown keys {', '.join(unknown)}; allowed: "
            f"{', '.join(sorted(APPLIED + INERT))}"
        )
    out = {k: v for k, v in section.items() if v is not None}
    hook = out.get("startup_hook")
    if hook is not None and not isinstance(hook, str):
        raise ContainerDefaultsError(f"{where}.startup_hook must be a shell command (a string)")
    try:
        if "environment_variables" in out:
            out["environment_variables"] = _env_map(out["environment_variables"])
    except (TypeError, ValueError) as e:
        raise ContainerDefaultsError(f"{where}.environment_variables: {e}") from e
    mounts = out.get("bind_mounts")
    if mounts is not None and (
        not isinstance(mounts, list)
        or any(not isinstance(m, Mapping) or not m.get("host_path") for m in mounts)
    ):
        raise ContainerDefaultsError(
            f"{where}.bind_mounts must be a list of {{host_path, container_path}} mappings"
        )
    return out


def _env_map(value: Any) -> dict[str, list[str]]:
    """``KEY=VALUE`` strings as 0.37 shows them: one list for every accelerator, or each its
    own (``{cpu, cuda, rocm}``)."""
    if isinstance(value, list):
        return {a: [str(v) for v in value] for a in _ACCELERATORS}
    if isinstance(value, Mapping):
        bad = sorted(str(k) for k in value if k not in _ACCELERATORS)
        if bad:
            raise ValueError(f"unknown accelerators {', '.join(bad)} (cpu, cuda, rocm)")
        return {a: [str(v) for v in value.get(a) or []] for a in _ACCELERATORS}
    raise TypeError("a list of KEY=VALUE strings or a mapping of cpu, cuda and rocm lists")


def _by_name(preferred: list[str], other: list[str]) -> list[str]:
    """``preferred``, then the entries of ``other`` whose name it does not set (0.37)."""
    names = {v.split("=", 1)[0] for v in preferred}
    return [*preferred, *(v for v in other if v.split("=", 1)[0] not in names)]


def _by_container_path(preferred: list[Any], other: list[Any]) -> list[Any]:
    paths = {m.get("container_path") for m in preferred if isinstance(m, Mapping)}
    extra = [m for m in other if not isinstance(m, Mapping) or m.get("container_path") not in paths]
    return [*preferred, *extra]


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """A pool's defaults (``over``) over the master's (``base``), as 0.37 merges them."""
    out = {**base, **{k: v for k, v in over.items() if k != "environment_variables"}}
    if "environment_variables" in over and "environment_variables" in base:
        b, o = base["environment_variables"], over["environment_variables"]
        out["environment_variables"] = {a: _by_name(o[a], b[a]) for a in _ACCELERATORS}
    elif "environment_variables" in over:
        out["environment_variables"] = over["environment_variables"]
    if "bind_mounts" in over and "bind_mounts" in base:
        out["bind_mounts"] = _by_container_path(over["bind_mounts"], base["bind_mounts"])
    if "log_policies" in over and "log_policies" in base:
        out["log_policies"] = [*over["log_policies"], *base["log_policies"]]
    return out


@dataclasses.dataclass(frozen=True)
class ContainerDefaults:
    """The master config's ``task_container_defaults`` (``master``) and each resource pool's
    (``pools``, by ``pool_name``)."""

    master: dict[str, Any] = dataclasses.field(default_factory=dict)
    pools: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse(cls, master: Any = None, resource_pools: Any = None) -> ContainerDefaults:
        """From the master config's two sections.

        Raises:
            ContainerDefaultsError: a section of the wrong shape or with unknown keys (the
                message names it and what is allowed).
        """
        pools: dict[str, dict[str, Any]] = {}
        if resource_pools is not None and not isinstance(resource_pools, list):
            raise ContainerDefaultsError("resource_pools must be a list of pools")
        for i, pool in enumerate(resource_pools or []):
            if not isinstance(pool, Mapping) or not pool.get("pool_name"):
                raise ContainerDefaultsError(f"resource_pools[{i}] needs a pool_name")
            name = str(pool["pool_name"])
            other = sorted(str(k) for k in pool if k not in _POOL_KEYS)
            if other:
                raise ContainerDefaultsError(
                    f"resource_pools[{i}] ({name}): {', '.join(other)} are settings of 0.37's "
                    f"agent pools, which this master does not have; a pool here takes "
                    f"{', '.join(_POOL_KEYS)}"
                )
            where = f"resource_pools[{i}] ({name}).task_container_defaults"
            pools[name] = _check(pool.get("task_container_defaults"), where)
        return cls(_check(master, "task_container_defaults"), pools)

    def of_pool(self, pool: str | None) -> dict[str, Any]:
        """The defaults in force for a task of ``pool`` (None: the default pool)."""
        return _merge(self.master, self.pools.get(pool or DEFAULT_POOL, {}))

    def startup_hook(self, pool: str | None) -> str:
        return str(self.of_pool(pool).get("startup_hook") or "")

    def apply(self, config: dict[str, Any], experiment: bool = True) -> dict[str, Any]:
        """``config`` (an experiment's, or a task's when not ``experiment``, as sent) with the
        defaults of its pool laid under what it leaves unset (0.37's ``MergeIntoExpConfig``;
        a task takes the environment and bind mounts)."""
        resources = config.get("resources")
        pool = resources.get("resource_pool") if isinstance(resources, Mapping) else None
        tcd = self.of_pool(str(pool) if pool else None)
        if not tcd:
            return config
        out = dict(config)
        environment = dict(out.get("environment") or {})
        for key in _ENVIRONMENT_KEYS:
            if key in tcd and environment.get(key) is None:
                environment[key] = tcd[key]
        if "environment_variables" in tcd:
            own = _env_map(environment.get("environment_variables") or [])
            mine = tcd["environment_variables"]
            # The defaults first: a variable the config sets again comes later and wins.
            environment["environment_variables"] = {a: [*mine[a], *own[a]] for a in _ACCELERATORS}
        if environment:
            out["environment"] = environment
        if "bind_mounts" in tcd:
            out["bind_mounts"] = _by_container_path(
                list(out.get("bind_mounts") or []), list(tcd["bind_mounts"])
            )
        for key in ("log_policies", "preemption_timeout") if experiment else ():
            if key in tcd and out.get(key) is None:
                out[key] = tcd[key]
        return out

    def shown(self) -> dict[str, Any]:
        """The two sections as ``GET /api/v1/master/config`` shows them (0.37's keys)."""
        pools = [{"pool_name": n, "task_container_defaults": d} for n, d in self.pools.items()]
        return {"task_container_defaults": self.master or None, "resource_pools": pools}
