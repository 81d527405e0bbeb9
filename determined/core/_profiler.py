"""``ProfilerContext``: system metrics (CPU, memory, disk, network, GPU) sampled in the
background and reported to the master as metric groups.

One sampler thread per node (local rank 0) takes a sample of every group each
``sampling_interval`` seconds and, every ``samples_per_report`` samples, hands each group's
average to a reporter as ``{agent_id: {...}}``. What is measured is in ``_profiler_samplers``.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from determined.core import _profiler_samplers as samplers
from determined.core._distributed import DistributedContext

logger = logging.getLogger("determined.core")

# reporter(group, {agent_id: metrics}, report_time). Called from the sampler thread, so it
# should only queue the report (the cluster backend hands it to the metrics shipper, which
# posts POST /api/v1/trials/{id}/metrics without stepsCompleted).
ProfilerReporter = Callable[[str, dict[str, Any], datetime.datetime], None]

MIN_SAMPLING_INTERVAL_S = 0.1


def _validate(sampling_interval: float, samples_per_report: int) -> None:
    if isinstance(sampling_interval, bool) or not isinstance(sampling_interval, (int, float)):
        raise ValueError(
            f"sampling_interval must be a number of seconds >= {MIN_SAMPLING_INTERVAL_S}, "
            f"not {sampling_interval!r}"
        )
    if sampling_interval < MIN_SAMPLING_INTERVAL_S:
        raise ValueError(
            f"sampling_interval must be at least {MIN_SAMPLING_INTERVAL_S} seconds, got "
            f"{sampling_interval}; sample less often"
        )
    if (
        isinstance(samples_per_report, bool)
        or not isinstance(samples_per_report, int)
        or samples_per_report < 1
    ):
        raise ValueError(
            "samples_per_report is how many samples are averaged into one report and must be "
            f"an int >= 1, not {samples_per_report!r}"
        )


class ProfilerContext:
    """Turns system-metrics profiling on and off (``core_context.profiler``).

    Metrics are per machine, so only local rank 0 samples; on other ranks ``on()`` checks its
    arguments and does nothing else. Any rank may call ``on()``/``off()``; neither blocks on
    other ranks. ``core.Context.close()`` turns profiling off.

    Args:
        agent_id: the machine's name (``ClusterInfo.agent_id``); each report is keyed by it.
        metrics_reporter: receives ``(group, {agent_id: metrics}, report_time)`` from the
            sampler thread; it must not block for long.
        distributed: this process's ``DistributedContext`` (for its local rank); None never
            samples (``DummyProfilerContext``).
    """

    def __init__(
        self,
        agent_id: str,
        metrics_reporter: ProfilerReporter,
        distributed: DistributedContext | None,
    ) -> None:
        self._agent_id = agent_id
        self._reporter = metrics_reporter
        self._distributed = distributed
        self._thread: _SamplerThread | None = None

    def _samples_here(self) -> bool:
        return self._distributed is not None and self._distributed.get_local_rank() == 0

    def on(self, sampling_interval: float = 1, samples_per_report: int = 10) -> None:
        """Start sampling every ``sampling_interval`` seconds (at least 0.1) and reporting the
        average of every ``samples_per_report`` samples (an int >= 1).

        Does nothing if profiling is already on (even with other arguments).

        Raises:
            ValueError: ``sampling_interval`` below 0.1, or ``samples_per_report`` not an
                int >= 1.
        """
        if self._thread is not None:
            return
        _validate(sampling_interval, samples_per_report)
        if not self._samples_here():
            return
        logger.info("system metrics profiling on")
        self._thread = _SamplerThread(
            self._agent_id, self._reporter, float(sampling_interval), samples_per_report
        )
        self._thread.start()

    def off(self) -> None:
        """Stop sampling; samples taken since the last report are reported first. Waits for
        the sampler thread to end. Does nothing if profiling is off."""
        if self._thread is None:
            return
        logger.info("system metrics profiling off")
        self._close()

    def _close(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.stop()


class DummyProfilerContext(ProfilerContext):
    """The profiler without a master: ``on()`` checks its arguments (as on a cluster) and
    nothing is sampled."""

    def __init__(self) -> None:
        super().__init__("", _discard, None)


def _discard(group: str, metrics: dict[str, Any], report_time: datetime.datetime) -> None:
    pass


class _SamplerThread(threading.Thread):
    def __init__(
        self, agent_id: str, reporter: ProfilerReporter, interval: float, per_report: int
    ) -> None:
        super().__init__(name="profiler-sampler", daemon=True)
        self._agent_id = agent_id
        self._reporter = reporter
        self._interval = interval
        self._per_report = per_report
        self._stopping = threading.Event()
        # Built here, not in run(): rate baselines start at on(), as in the reference.
        self._samplers = samplers.default_samplers()

    def stop(self) -> None:
        self._stopping.set()
        self.join()

    def run(self) -> None:
        taken: dict[str, list[samplers.Sample]] = {s.group: [] for s in self._samplers}
        count = 0
        while True:
            next_at = time.monotonic() + self._interval
            for s in self._samplers:
                taken[s.group].append(self._sample(s))
            count += 1
            if count == self._per_report:
                self._report(taken)
                count = 0
            if self._stopping.wait(max(next_at - time.monotonic(), 0.0)):
                break
        if count:
            self._report(taken)

    def _sample(self, sampler: samplers.GroupSampler) -> samplers.Sample:
        try:
            return sampler.sample()
        except Exception as e:
            logger.warning(f"sampling {sampler.group} metrics failed: {e}")
            return {}

    def _report(self, taken: dict[str, list[samplers.Sample]]) -> None:
        for group, samples in taken.items():
            metrics = samplers.average(samples)
            samples.clear()
            if not metrics:
                continue
            try:
                now = datetime.datetime.now(datetime.timezone.utc)
                self._reporter(group, {self._agent_id: metrics}, now)
            except Exception as e:
                # Profiling must never take the training process down.
                logger.warning(f"reporting {group} profiler metrics failed: {e}")
