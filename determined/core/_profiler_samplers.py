"""What the system-metrics profiler measures: one sampler per metric group, and averaging.

Metric names, units and groups are the reference's, because the master and web UI read them:

============  ==================================================================================
group         metrics
============  ==================================================================================
``gpu``       ``{<gpu uuid>: {"gpu_util": percent, "gpu_free_memory": bytes}}`` (NVML only)
``cpu``       ``cpu_util_simple``: percent of all cores since the previous sample
``memory``    ``memory_free``: available memory in GB (1e9 bytes)
``disk``      ``disk_iops``, ``disk_throughput_read``, ``disk_throughput_write`` (bytes/s), and
              ``{<mount>: {"disk_util": percent used}}`` for ``/`` and ``/determined_shared_fs``
``network``   ``net_throughput_sent``, ``net_throughput_recv`` (bytes/s)
============  ==================================================================================
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import psutil

logger = logging.getLogger("determined.core")

# The reference samples disk usage of the root and of the container's shared_fs mount.
DISK_PATHS = ("/", "/determined_shared_fs")

Sample = dict[str, Any]  # name -> float, or label -> {name -> float}


class GroupSampler(Protocol):
    group: str

    def sample(self) -> Sample: ...


class CpuSampler:
    group = "cpu"

    def __init__(self) -> None:
        psutil.cpu_percent()  # the first call only sets the baseline (and would return 0.0)

    def sample(self) -> Sample:
        return {"cpu_util_simple": psutil.cpu_percent()}


class MemorySampler:
    group = "memory"

    def sample(self) -> Sample:
        return {"memory_free": psutil.virtual_memory().available / 1e9}


class _Rates:
    """Per-second rates of growing counters since the previous call."""

    def __init__(self, counters: Mapping[str, float]) -> None:
        self._last_t, self._last = time.monotonic(), dict(counters)

    def __call__(self, counters: Mapping[str, float]) -> dict[str, float]:
        now = time.monotonic()
        dt = max(now - self._last_t, 1e-9)
        rates = {k: (v - self._last.get(k, v)) / dt for k, v in counters.items()}
        self._last_t, self._last = now, dict(counters)
        return rates


def _disk_counters() -> dict[str, float]:
    io = psutil.disk_io_counters()
    if io is None:  # no disks visible (some containers)
        return {}
    return {"ops": io.read_count + io.write_count, "read": io.read_bytes, "write": io.write_bytes}


class DiskSampler:
    group = "disk"

    def __init__(self, paths: Sequence[str] = DISK_PATHS) -> None:
        self._paths = [p for p in paths if _usage_readable(p)]
        self._rates = _Rates(_disk_counters())

    def sample(self) -> Sample:
        rates = self._rates(_disk_counters())
        out: Sample = {}
        if rates:
            out["disk_iops"] = rates["ops"]
            out["disk_throughput_read"] = rates["read"]
            out["disk_throughput_write"] = rates["write"]
        for path in self._paths:
            out[path] = {"disk_util": psutil.disk_usage(path).percent}
        return out


def _usage_readable(path: str) -> bool:
    try:
        psutil.disk_usage(path)
        return True
    except OSError:
        return False


def _net_counters() -> dict[str, float]:
    io = psutil.net_io_counters()
    return {"sent": io.bytes_sent, "recv": io.bytes_recv}


class NetworkSampler:
    group = "network"

    def __init__(self) -> None:
        self._rates = _Rates(_net_counters())

    def sample(self) -> Sample:
        rates = self._rates(_net_counters())
        return {"net_throughput_sent": rates["sent"], "net_throughput_recv": rates["recv"]}


class GpuSampler:
    """Per-GPU utilization and free memory through NVML (the ``pynvml`` module, from the
    ``nvidia-ml-py`` package), which is not a dependency: without it, or without GPUs,
    :func:`gpu_sampler` returns None and the ``gpu`` group is not reported."""

    group = "gpu"

    def __init__(self, nvml: Any, handles: dict[str, Any]) -> None:
        self._nvml, self._handles = nvml, handles

    def sample(self) -> Sample:
        out: Sample = {}
        for uuid, handle in self._handles.items():
            out[uuid] = {
                "gpu_util": self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu,
                "gpu_free_memory": self._nvml.nvmlDeviceGetMemoryInfo(handle).free,
            }
        return out


def gpu_sampler() -> GpuSampler | None:
    try:
        import pynvml  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        logger.info("pynvml is not installed: GPU metrics are not collected")
        return None
    try:
        pynvml.nvmlInit()
        handles = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            # Calls that can fail per device are tried once here, not in every sample.
            pynvml.nvmlDeviceGetMemoryInfo(handle)
            pynvml.nvmlDeviceGetUtilizationRates(handle)
            handles[uuid.decode() if isinstance(uuid, bytes) else str(uuid)] = handle
    except pynvml.NVMLError as e:
        logger.info(f"NVML is not usable ({e}): GPU metrics are not collected")
        return None
    return GpuSampler(pynvml, handles) if handles else None


def default_samplers() -> list[GroupSampler]:
    """The reference's groups, in its reporting order: gpu (when NVML works), cpu, memory,
    disk, network. Rates (disk, network) are measured from this call on."""
    gpu = gpu_sampler()
    rest: list[GroupSampler] = [CpuSampler(), MemorySampler(), DiskSampler(), NetworkSampler()]
    return [gpu, *rest] if gpu is not None else rest


def average(samples: Sequence[Sample]) -> Sample:
    """The mean of each metric over the samples that have it, one level of labels deep
    (``{"/": {"disk_util": ..}}`` is averaged per label and name)."""
    sums: dict[str, Any] = {}
    counts: dict[str, Any] = {}
    for sample in samples:
        for key, value in sample.items():
            if isinstance(value, Mapping):
                inner_sums, inner_counts = sums.setdefault(key, {}), counts.setdefault(key, {})
                for name, v in value.items():
                    inner_sums[name] = inner_sums.get(name, 0.0) + v
                    inner_counts[name] = inner_counts.get(name, 0) + 1
            else:
                sums[key] = sums.get(key, 0.0) + value
                counts[key] = counts.get(key, 0) + 1
    return {
        k: {n: s / counts[k][n] for n, s in v.items()} if isinstance(v, dict) else v / counts[k]
        for k, v in sums.items()
    }
