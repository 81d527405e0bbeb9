"""core.Context.alert() and TrainContext.set_metadata()/get_metadata() on the wire and
locally (docs/reference/harness.md §2, §6; docs/core.md)."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
from _kit.core_env import EXPERIMENT_ID, TRIAL_ID
from _kit.recording_master import RecordingMaster

from determined import core

REF_PYTHON = pathlib.Path(__file__).resolve().parents[2] / ".refvenv" / "bin" / "python"

# The body 0.37's alert() builds, from its own bindings (printed as JSON).
REF_ALERT_BODY = """
import json, sys
from determined.common.api import bindings
levels = {"warn": bindings.v1LogLevel.WARNING, "debug": bindings.v1LogLevel.DEBUG,
          "error": bindings.v1LogLevel.ERROR}
title, description, level = json.loads(sys.argv[1])
body = bindings.v1PostWebhookEventDataRequest(
    data=bindings.v1CustomWebhookEventData(
        title=title or "", description=description or "",
        level=levels.get(level, bindings.v1LogLevel.INFO)),
    experimentId=int(sys.argv[2]), trialId=int(sys.argv[3]))
print(json.dumps(body.to_json(True)))
"""

CALLS = [("t", "d", "warn"), (None, None, "info"), ("x", None, "error"), ("", "y", "debug")]


def test_alert_posts_the_custom_webhook_body(cluster_trial: RecordingMaster) -> None:
    cluster_trial.route("POST", r"/api/v1/webhooks/custom", {})
    with core.init() as ctx:
        for title, description, level in CALLS:
            ctx.alert(title=title, description=description, level=level)  # type: ignore[arg-type]
        ctx.alert(level=None)
    sent = [r.body for r in cluster_trial.find("POST", r"/api/v1/webhooks/custom")]
    assert [b["data"]["level"] for b in sent] == [
        "LOG_LEVEL_WARNING",
        "LOG_LEVEL_INFO",
        "LOG_LEVEL_ERROR",
        "LOG_LEVEL_DEBUG",
        "LOG_LEVEL_INFO",
    ]
    assert sent[1] == {
        "data": {"title": "", "description": "", "level": "LOG_LEVEL_INFO"},
        "experimentId": EXPERIMENT_ID,
        "trialId": TRIAL_ID,
    }
    if not REF_PYTHON.exists():
        pytest.skip("no .refvenv to compare with: run scripts/setup.sh --tests")
    for call, body in zip(CALLS, sent, strict=False):
        ref = subprocess.run(
            [str(REF_PYTHON), "-I", "-c", REF_ALERT_BODY, json.dumps(call)]
            + [str(EXPERIMENT_ID), str(TRIAL_ID)],
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(ref.stdout) == body, call


def test_metadata_is_posted_and_read_per_run(cluster_trial: RecordingMaster) -> None:
    path = rf"/api/v1/runs/{TRIAL_ID}/metadata"
    cluster_trial.route("POST", path, {"metadata": {"a": 1}})
    cluster_trial.route("GET", path, {"metadata": {"a": 1}})
    with core.init() as ctx:
        assert ctx.train.set_metadata({"a": 1}) == {"a": 1}
        assert ctx.train.get_metadata() == {"a": 1}
        with pytest.raises(TypeError, match="dict with string keys"):
            ctx.train.set_metadata([("a", 1)])  # type: ignore[arg-type]
    (post,) = cluster_trial.find("POST", path)
    assert post.body == {"metadata": {"a": 1}, "runId": TRIAL_ID}


def test_alert_in_a_task_that_is_not_a_trial_raises(
    cluster_trial: RecordingMaster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_TASK_TYPE", "COMMAND")
    with core.init() as ctx, pytest.raises(ValueError, match="only works in a trial"):
        ctx.alert(title="x")


def test_local_alert_is_logged_and_metadata_stays_in_process(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="determined.core")
    with core.init() as ctx:
        ctx.alert(title="loss spiked", description="9.0", level="warn")
        assert ctx.train.get_metadata() == {}
        given = {"stage": {"n": 1}}
        assert ctx.train.set_metadata(given) == given
        given["stage"]["n"] = 2  # a copy was kept
        assert ctx.train.get_metadata() == {"stage": {"n": 1}}
        assert ctx.train.set_metadata({"b": 2}) == {"b": 2}
        assert ctx.train.get_metadata() == {"b": 2}
    assert "alert (LOG_LEVEL_WARNING): loss spiked: 9.0" in caplog.text
