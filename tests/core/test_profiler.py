"""determined/core/_profiler.py and _profiler_samplers.py: real sampling with psutil on this
machine, reports collected from the reporter callable."""

from __future__ import annotations

import datetime
import math
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil
import pytest
from _kit.master import free_port
from hypothesis import given
from hypothesis import strategies as st

from determined.core import _profiler_samplers as samplers
from determined.core._distributed import DistributedContext
from determined.core._profiler import DummyProfilerContext, ProfilerContext

AGENT = "agent-1"
GROUPS = ["cpu", "memory", "disk", "network"]  # plus "gpu" first where NVML works


class Reports:
    """The reporter: a thread-safe list of (group, metrics, report_time)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, dict[str, Any], datetime.datetime]] = []
        self._lock = threading.Lock()

    def __call__(self, group: str, metrics: dict[str, Any], at: datetime.datetime) -> None:
        with self._lock:
            self.items.append((group, metrics, at))

    def groups(self) -> list[str]:
        with self._lock:
            return [g for g, _, _ in self.items if g != "gpu"]

    def wait_for(self, n: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.groups()) < n and time.monotonic() < deadline:
            time.sleep(0.02)


def single() -> DistributedContext:
    return DistributedContext(
        rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1
    )


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "profiler-sampler"]


@pytest.fixture
def two_local_ranks() -> Iterator[list[DistributedContext]]:
    """Two real ranks on this node (ZMQ sockets), built concurrently as they would be."""
    ports = {"pub_port": free_port(), "pull_port": free_port()}

    def make(rank: int) -> DistributedContext:
        return DistributedContext(
            rank=rank, size=2, local_rank=rank, local_size=2, cross_rank=0, cross_size=1,
            timeout=30, **ports,
        )  # fmt: skip

    with ThreadPoolExecutor(2) as pool:
        ctxs = list(pool.map(make, [0, 1]))
    yield ctxs
    for c in ctxs:
        c.close()


def test_reports_averaged_groups_keyed_by_agent_at_each_round() -> None:
    reports = Reports()
    profiler = ProfilerContext(AGENT, reports, single())
    profiler.on(sampling_interval=0.1, samples_per_report=2)
    try:
        reports.wait_for(2 * len(GROUPS))
    finally:
        profiler.off()
    groups = reports.groups()
    assert groups[: 2 * len(GROUPS)] == GROUPS * 2
    by_group = {g: m for g, m, _ in reports.items}
    assert all(list(m) == [AGENT] for m in by_group.values())
    cpu, memory = by_group["cpu"][AGENT], by_group["memory"][AGENT]
    disk, network = by_group["disk"][AGENT], by_group["network"][AGENT]
    assert set(cpu) == {"cpu_util_simple"} and 0 <= cpu["cpu_util_simple"] <= 100
    assert set(memory) == {"memory_free"} and memory["memory_free"] > 0  # GB
    assert {"disk_iops", "disk_throughput_read", "disk_throughput_write"} <= set(disk)
    assert 0 <= disk["/"]["disk_util"] <= 100
    assert all(disk[k] >= 0 for k in ("disk_iops", "disk_throughput_read"))
    assert set(network) == {"net_throughput_sent", "net_throughput_recv"}
    assert all(v >= 0 for v in network.values())


def test_rounds_are_samples_per_report_intervals_apart() -> None:
    reports = Reports()
    profiler = ProfilerContext(AGENT, reports, single())
    profiler.on(sampling_interval=0.1, samples_per_report=2)
    try:
        reports.wait_for(3 * len(GROUPS))
    finally:
        profiler.off()
    cpu_times = [at for g, _, at in reports.items if g == "cpu"]
    assert all(t.tzinfo is not None and t.utcoffset() == datetime.timedelta(0) for t in cpu_times)
    gaps = [(b - a).total_seconds() for a, b in zip(cpu_times, cpu_times[1:], strict=False)]
    # Two sampling periods of at least 0.1 s each per round (less the jitter of sampling).
    assert gaps and min(gaps) >= 0.15


def test_off_reports_the_partial_round_and_stops_the_thread() -> None:
    reports = Reports()
    profiler = ProfilerContext(AGENT, reports, single())
    profiler.on(sampling_interval=0.1, samples_per_report=1000)
    time.sleep(0.35)
    assert reports.groups() == []
    profiler.off()
    assert reports.groups() == GROUPS  # the samples so far, averaged, reported once
    assert sampler_threads() == []
    time.sleep(0.25)
    assert reports.groups() == GROUPS  # nothing after off()


def test_on_and_off_are_idempotent_and_on_again_restarts() -> None:
    reports = Reports()
    profiler = ProfilerContext(AGENT, reports, single())
    profiler.off()  # off before on: nothing
    profiler.on(0.1, 1)
    profiler.on(0.1, 1)
    profiler.on(0.01, 0)  # already on: ignored (the reference checks nothing then)
    assert len(sampler_threads()) == 1
    profiler.off()
    profiler.off()
    assert sampler_threads() == []
    count = len(reports.groups())
    profiler.on(0.1, 1)
    reports.wait_for(count + len(GROUPS))
    profiler._close()  # what core.Context.close() calls
    assert len(reports.groups()) >= count + len(GROUPS) and sampler_threads() == []


@pytest.mark.parametrize(
    "interval, per_report",
    [(0.05, 10), (0.0999, 1), (-1, 1), ("1", 1), (1, 0), (1, -3), (1, 2.0), (1, "10"), (1, True)],
)
@pytest.mark.parametrize("dummy", [False, True])
def test_bad_arguments_raise_value_error(interval: Any, per_report: Any, dummy: bool) -> None:
    profiler = DummyProfilerContext() if dummy else ProfilerContext(AGENT, Reports(), single())
    with pytest.raises(ValueError, match="sampling_interval|samples_per_report"):
        profiler.on(interval, per_report)
    assert sampler_threads() == []


def test_local_rank_other_than_zero_is_a_no_op(two_local_ranks: list[DistributedContext]) -> None:
    chief_reports, worker_reports = Reports(), Reports()
    chief = ProfilerContext(AGENT, chief_reports, two_local_ranks[0])
    worker = ProfilerContext(AGENT, worker_reports, two_local_ranks[1])
    with pytest.raises(ValueError):
        worker.on(0.05)  # arguments are still checked on every rank
    worker.on(0.1, 1)
    assert sampler_threads() == []
    chief.on(0.1, 1)
    assert len(sampler_threads()) == 1
    chief_reports.wait_for(len(GROUPS))
    chief.off()
    worker.off()
    assert chief_reports.groups()[: len(GROUPS)] == GROUPS and worker_reports.items == []


def test_dummy_never_samples() -> None:
    dummy = DummyProfilerContext()
    dummy.on(0.1, 1)
    assert sampler_threads() == []
    dummy.off()
    dummy._close()


def test_a_failing_reporter_is_logged_and_sampling_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []

    def reporter(group: str, metrics: dict[str, Any], at: datetime.datetime) -> None:
        calls.append(group)
        raise ConnectionError("master unreachable")

    profiler = ProfilerContext(AGENT, reporter, single())
    with caplog.at_level("WARNING", logger="determined.core"):
        profiler.on(0.1, 1)
        deadline = time.monotonic() + 10
        while calls.count("cpu") < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        profiler.off()
    assert calls.count("cpu") >= 2
    assert "master unreachable" in caplog.text


def test_disk_iops_is_operations_per_second() -> None:
    # The reference divides only the previous count by the interval (operator precedence);
    # ours is the difference of counts over the interval, so it is 0 for an idle window and
    # never the raw cumulative count.
    disk = samplers.DiskSampler(paths=["/"])
    first = disk.sample()
    io = psutil.disk_io_counters()
    if io is not None:
        assert first["disk_iops"] < io.read_count + io.write_count


finite = st.floats(min_value=-1e6, max_value=1e6)


@given(
    st.lists(
        st.fixed_dictionaries(
            {"a": finite}, optional={"b": finite, "/": st.fixed_dictionaries({"u": finite})}
        ),
        min_size=1,
        max_size=8,
    )
)
def test_average_is_the_mean_of_each_metric_over_the_samples_that_have_it(
    samples: list[dict[str, Any]],
) -> None:
    avg = samplers.average(samples)
    assert math.isclose(avg["a"], sum(s["a"] for s in samples) / len(samples), abs_tol=1e-6)
    bs = [s["b"] for s in samples if "b" in s]
    assert ("b" in avg) == bool(bs)
    if bs:
        assert math.isclose(avg["b"], sum(bs) / len(bs), abs_tol=1e-6)
    us = [s["/"]["u"] for s in samples if "/" in s]
    if us:  # nested: every sample counts, not only the last (the reference's slip)
        assert math.isclose(avg["/"]["u"], sum(us) / len(us), abs_tol=1e-6)
    else:
        assert "/" not in avg


def test_gpu_group_is_absent_without_nvml() -> None:
    try:
        import pynvml  # noqa: F401
    except ImportError:
        assert samplers.gpu_sampler() is None
        assert [s.group for s in samplers.default_samplers()] == GROUPS
    else:
        groups = [s.group for s in samplers.default_samplers()]
        assert groups[-4:] == GROUPS and groups[:-4] in ([], ["gpu"])


def test_the_first_cpu_sample_measures_since_the_sampler_was_built() -> None:
    cpu = samplers.CpuSampler()
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        pass  # keep one core busy
    assert cpu.sample()["cpu_util_simple"] > 0
