"""SIGTERM or Ctrl-C during the local Core API tutorial (examples/tutorials/core_api/
2_checkpoints.py, run as a real process): a final checkpoint, exit status 0, and a rerun that
resumes from that checkpoint and ends with the weights of a run that was never stopped.

Ctrl-C is SIGINT sent to the process group, as a terminal does. The tutorial is copied to a
temporary directory because it keeps its ``latest_checkpoint`` pointer next to itself.
"""

from __future__ import annotations

import json
import os
import pathlib
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import IO

import pytest

pytestmark = pytest.mark.e2e

TUTORIAL = pathlib.Path(__file__).resolve().parents[2] / "examples" / "tutorials" / "core_api"
BATCHES = 200


def _lines(stream: IO[str]) -> queue.Queue[str | None]:
    q: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stream:
            q.put(line)
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def _wait_for(q: queue.Queue[str | None], pattern: str, seen: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = q.get(timeout=0.1)
        except queue.Empty:
            continue
        if line is None:
            break
        seen.append(line)
        if re.search(pattern, line):
            return
    raise AssertionError(f"no line matching {pattern!r}; output so far:\n{''.join(seen)}")


def _straight_run_weights() -> dict[str, float]:
    """The plain loop, in this process: what an uninterrupted run ends with."""
    sys.path.insert(0, str(TUTORIAL))
    try:
        from model import LinearModel
    finally:
        sys.path.remove(str(TUTORIAL))
    model = LinearModel()
    for _ in range(BATCHES):
        model.train_batch()
    return {"w": model.w, "b": model.b}


def _checkpoint(storage_id: str) -> tuple[dict[str, object], dict[str, object]]:
    path = pathlib.Path(os.environ["DET_HOME"]) / "checkpoints" / storage_id
    metadata = json.loads((path / "metadata.json").read_text())
    return metadata, json.loads((path / "model.json").read_text())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_signal_gives_a_final_checkpoint_exit_0_and_a_rerun_resumes(
    tmp_path: pathlib.Path, sig: signal.Signals
) -> None:
    tutorial = shutil.copytree(
        TUTORIAL,
        tmp_path / "tutorial",
        ignore=shutil.ignore_patterns("latest_checkpoint", "__pycache__"),
    )
    script = [sys.executable, str(tutorial / "2_checkpoints.py"), "--batches", str(BATCHES)]
    proc = subprocess.Popen(
        [*script, "--fresh"], stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stderr is not None
        lines = _lines(proc.stderr)
        seen: list[str] = []
        # The first checkpoint (batch 20) proves core.init() is in place and training runs.
        _wait_for(lines, r"saved checkpoint \S+ \(steps_completed 20\)$", seen, timeout=60)
        os.killpg(proc.pid, sig)
        assert proc.wait(timeout=60) == 0, "".join(seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    while (line := lines.get(timeout=10)) is not None:
        seen.append(line)
    out = "".join(seen)
    assert f"received {sig.name}" in out and "preemption requested" in out
    stopped = re.search(r"asked to stop: state saved at batch (\d+), exiting", out)
    assert stopped, out
    stopped_at = int(stopped.group(1))
    assert 20 <= stopped_at < BATCHES
    assert "validation metrics" not in out
    final_id = (tutorial / "latest_checkpoint").read_text().strip()
    assert re.findall(r"saved checkpoint (\S+) \(steps_completed", out)[-1] == final_id
    metadata, _ = _checkpoint(final_id)
    assert metadata == {"steps_completed": stopped_at}

    rerun = subprocess.run(script, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert f"resumed from checkpoint {final_id} at batch {stopped_at}" in rerun.stderr
    first_report = re.search(r"training metrics at step (\d+)", rerun.stderr)
    assert first_report and int(first_report.group(1)) == (stopped_at // 10 + 1) * 10
    assert "validation metrics at step 200" in rerun.stderr
    metadata, weights = _checkpoint((tutorial / "latest_checkpoint").read_text().strip())
    assert metadata == {"steps_completed": BATCHES}
    assert {k: weights[k] for k in ("w", "b")} == _straight_run_weights()
