"""Trial logs for ``det trial logs``, ``det e logs`` and ``det e create -f``: printing,
progress display and failure causes. Reading the lines from the master lives in
``determined.common.api._logs``, shared with the SDK's ``Trial.iter_logs``."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from determined import _user_error, errors
from determined.cli import _render
from determined.common.api import Session, _routes
from determined.common.api import _logs as _api_logs

TERMINAL_STATES = _api_logs.TERMINAL_STATES
trial_logs = _api_logs.trial_logs
_POLL_SECONDS = _api_logs.POLL_SECONDS


class Watcher(threading.Thread):
    """While logs are followed, print on stderr ``Experiment N: STATE, P%`` whenever it changes
    (with ``experiment_id``) and, once ``trial_id`` is set (before :meth:`start`), each
    validation of that trial as it arrives: ``Trial T validation after B batches: name=value``
    (read from the master's validation-metrics stream on a second thread). Its own session:
    the log reader's must not be shared across threads."""

    def __init__(
        self,
        sess: Session,
        *,
        experiment_id: int | None = None,
        trial_id: int | None = None,
        interval: float = 2.0,
    ) -> None:
        super().__init__(daemon=True)
        self.sess = sess
        self.experiment_id = experiment_id
        self.trial_id = trial_id
        self.interval = interval
        self.halt = threading.Event()
        self._last_state = ""
        self._lock = threading.Lock()  # the thread and a final poll() from the caller
        self._validations: threading.Thread | None = None

    def start(self) -> None:
        if self.trial_id is not None:
            self._validations = threading.Thread(target=self._follow_validations, daemon=True)
            self._validations.start()
        super().start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop polling, print the experiment's final state, and let the validation stream
        (which ends once the trial has ended) print what it still has."""
        self.halt.set()
        if self._validations is not None:
            self._validations.join(timeout)
        self.poll(settle=timeout)

    def poll(self, settle: float = 0.0) -> None:
        """Print the experiment's state line if it changed. An experiment whose work is all
        done (progress 100%) shows as QUEUED until the master records its end: that line is
        never printed (it would say the finished experiment waits); ``settle`` seconds are
        spent waiting for the end instead."""
        if self.experiment_id is None:
            return
        with self._lock:
            deadline = time.monotonic() + settle
            while True:
                try:
                    exp = _routes.get_experiment(self.sess, self.experiment_id)
                except Exception:  # a display thread must never kill the command
                    return
                done = float(exp.get("progress") or 0.0) >= 1.0
                if done and exp.get("state") not in TERMINAL_STATES:
                    if time.monotonic() < deadline:
                        time.sleep(0.2)
                        continue
                    if exp.get("state") == "STATE_QUEUED":
                        return
                break
            line = (
                f"Experiment {self.experiment_id}: {_render.strip_state(exp.get('state'))}, "
                f"progress {_render.format_percent(exp.get('progress') or 0.0)}"
            )
            if line != self._last_state:
                self._last_state = line
                print(line, file=sys.stderr, flush=True)

    def _follow_validations(self) -> None:
        try:
            if self.trial_id is None:
                return
            resp = _routes.stream_validation_metrics(self.sess, self.trial_id)
            for raw in resp.iter_lines():
                if not raw:
                    continue
                for report in json.loads(raw).get("result", {}).get("metrics", []):
                    values = report.get("metrics") or {}
                    metrics = values.get("validation_metrics") or values.get("avg_metrics") or {}
                    shown = ", ".join(f"{k}={_metric(v)}" for k, v in sorted(metrics.items()))
                    print(
                        f"Trial {self.trial_id} validation after {report.get('totalBatches')} "
                        f"batches: {shown}",
                        file=sys.stderr,
                        flush=True,
                    )
        except Exception:  # a display thread must never kill the command
            return

    def run(self) -> None:
        while not self.halt.wait(self.interval):
            self.poll()


def _metric(value: Any) -> str:
    """A metric for a one-line summary: numbers with 6 significant digits."""
    if isinstance(value, float):
        return f"{value:.6g}"
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def format_line(entry: dict[str, Any]) -> str:
    """The reference's ``message``: ``[time] <container[:8]> [rank=N] || LEVEL: log``."""
    message = entry.get("message")
    if message:
        return str(message).rstrip("\n")
    stamp = entry.get("timestamp") or ""
    container = str(entry.get("containerId") or "")[:8].ljust(8)
    rank = entry.get("rankId")
    rank_part = f"[rank={rank}] " if rank is not None else ""
    level = str(entry.get("level") or "").replace("LOG_LEVEL_", "")
    level_part = f"{level}: " if level and level not in ("UNSPECIFIED", "INFO") else ""
    text = str(entry.get("log") or "").rstrip("\n")
    return f"[{stamp}] {container} {rank_part}|| {level_part}{text}"


class CauseFinder:
    """Finds why a trial failed in the log entries passed through :meth:`watch`: the first
    ERROR-level line (the harness and core log a failure at that level, naming the exception
    and where in the user's code it was raised), else the first Python traceback's last line
    (a script that failed before ``core.init``), with its innermost frame in user code."""

    _FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')

    def __init__(self) -> None:
        self.error_line: str | None = None
        self.traceback_line: str | None = None
        self._frame: str | None = None
        self._in_traceback = False

    @property
    def cause(self) -> str | None:
        return self.error_line or self.traceback_line

    def watch(self, entries: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for entry in entries:
            self._see(entry)
            yield entry

    def _see(self, entry: dict[str, Any]) -> None:
        text = str(entry.get("log") or "").rstrip()
        if self.error_line is None and entry.get("level") == "LOG_LEVEL_ERROR":
            self.error_line = text.strip() or None
        # Tracebacks go to stderr; stdout lines may interleave with them in the log.
        if self.traceback_line is not None or entry.get("stdtype") == "stdout":
            return
        if text.strip() == "Traceback (most recent call last):":
            self._in_traceback, self._frame = True, None
        elif self._in_traceback:
            frame = self._FRAME.match(text)
            if frame and not _user_error.is_library_path(frame["path"]):
                self._frame = f"{frame['path']}:{frame['line']} in {frame['func']}"
            elif text and not text[0].isspace():  # the exception line ends the traceback
                self._in_traceback = False
                where = f" (at {self._frame})" if self._frame else ""
                self.traceback_line = text.strip() + where


def report_failure(sess: Session, trial_id: int, cause: str | None) -> None:
    """When the trial ended in ERROR, say so on stderr in one line, with its cause if found."""
    try:
        state = _routes.get_trial(sess, trial_id).get("state")
    except errors.MasterError:
        return
    if state == "STATE_ERROR":
        why = cause or "no error line in its logs; the lines above show how it ended"
        print(f"Trial {trial_id} failed: {why}", file=sys.stderr, flush=True)


def print_logs(entries: Iterator[dict[str, Any]], *, as_json: bool = False) -> None:
    for entry in entries:
        print(json.dumps(entry) if as_json else format_line(entry), flush=True)


def lowest_trial_id(sess: Session, experiment_id: int) -> int | None:
    trials = _routes.list_experiment_trials(sess, experiment_id).get("trials") or []
    ids = sorted(int(t["id"]) for t in trials)
    return ids[0] if ids else None


def wait_for_first_trial(
    sess: Session, experiment_id: int, tick: Callable[[], None] | None = None
) -> int:
    """Poll until the experiment has a trial (or ends without one)."""
    while True:
        trial_id = lowest_trial_id(sess, experiment_id)
        if trial_id is not None:
            return trial_id
        exp = _routes.get_experiment(sess, experiment_id)
        if exp.get("state") in TERMINAL_STATES:
            raise _render.CliError(
                f"experiment {experiment_id} ended ({_render.strip_state(exp['state'])}) "
                "without starting a trial"
            )
        if tick is not None:
            tick()
        time.sleep(_POLL_SECONDS)


LEVELS = ("UNSPECIFIED", "TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def add_log_args(p: Any, *, allocations: bool = False) -> None:
    """The reference's log flags: follow, head/tail, and the filters (``--allocation-id``
    for task logs)."""
    p.add_argument("-f", "--follow", action="store_true", help="follow the logs, like tail -f")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--head", type=int, help="number of lines from the beginning")
    group.add_argument("--tail", type=int, help="number of lines from the end")
    p.add_argument("--json", action="store_true", help="print each entry as JSON")
    if allocations:
        p.add_argument("--allocation-id", dest="allocation_ids", action="append")
    p.add_argument("--agent-id", dest="agent_ids", action="append", help="repeat for more")
    p.add_argument("--container-id", dest="container_ids", action="append")
    p.add_argument("--rank-id", dest="rank_ids", type=int, action="append")
    p.add_argument("--timestamp-before", help="only lines before (RFC 3339)")
    p.add_argument("--timestamp-after", help="only lines after (RFC 3339)")
    p.add_argument("--level", choices=LEVELS, help="only lines of this level or higher")
    p.add_argument("--source", dest="sources", action="append")
    p.add_argument("--stdtype", dest="stdtypes", action="append", help="stdout or stderr")


def filters_of(args: Any) -> dict[str, Any]:
    """The master's filter query parameters for the flags :func:`add_log_args` added."""
    out: dict[str, Any] = {}
    for flag, param in (
        ("agent_ids", "agentIds"),
        ("container_ids", "containerIds"),
        ("allocation_ids", "allocationIds"),
        ("rank_ids", "rankIds"),
        ("sources", "sources"),
        ("stdtypes", "stdtypes"),
        ("timestamp_before", "timestampBefore"),
        ("timestamp_after", "timestampAfter"),
    ):
        value = getattr(args, flag, None)
        if value:
            out[param] = value
    level = getattr(args, "level", None)
    if level:
        out["levels"] = [f"LOG_LEVEL_{name}" for name in LEVELS[LEVELS.index(level) :]]
    return out
