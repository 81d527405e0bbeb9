"""determined/master/webhooks without a master process: which webhooks an event reaches (0.37's
rules), the signature, and the outbox delivered by a shipper started later (as after a master
restart)."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import pathlib
import threading
import time
from typing import Any

import pytest

from determined.master import webhooks
from determined.master.store import Store, _webhooks


def _named(**section: Any) -> dict[str, Any]:
    return {"integrations": {"webhooks": section}}


def _trigger(mode: str = "WORKSPACE", workspace_id: int | None = None) -> dict[str, Any]:
    return {"webhook_id": 7, "name": "hook", "mode": mode, "workspace_id": workspace_id}


@pytest.mark.parametrize(
    ("trigger", "config", "workspace", "reached"),
    [
        (_trigger(), {}, 1, True),  # global: every experiment
        (_trigger(), _named(exclude=True), 1, False),
        (_trigger(workspace_id=2), {}, 1, False),  # another workspace's
        (_trigger(workspace_id=2), {}, 2, True),
        (_trigger("SPECIFIC"), {}, 1, False),  # not named by the experiment
        (_trigger("SPECIFIC"), {"integrations": {"webhooks": {"webhook_id": [7]}}}, 1, True),
        (_trigger("SPECIFIC"), {"integrations": {"webhooks": {"webhook_name": ["hook"]}}}, 1, True),
        (
            _trigger("SPECIFIC"),
            {"integrations": {"webhooks": {"webhook_name": ["other"]}}},
            1,
            False,
        ),
        (_trigger("SPECIFIC"), None, 1, False),  # not an experiment's task
    ],
)
def test_which_webhooks_an_event_reaches(
    trigger: dict[str, Any], config: dict[str, Any] | None, workspace: int, reached: bool
) -> None:
    assert webhooks.matches(trigger, config, workspace) is reached


def test_the_signature_is_hmac_sha256_of_timestamp_comma_body() -> None:
    want = hmac.new(b"k", b'12,{"a": 1}', hashlib.sha256).hexdigest()
    assert webhooks.signature("k", 12, '{"a": 1}') == want


def test_queued_events_are_delivered_by_a_later_shipper(tmp_path: pathlib.Path) -> None:
    got: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            got.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/x"
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    with store.tx() as conn:  # queued, then the master died before delivering
        _webhooks.enqueue(conn, url, '{"n": 1}')
        _webhooks.enqueue(conn, url, '{"n": 2}')
    store.close()

    store = Store(f"sqlite:///{tmp_path / 'm.db'}")  # the restarted master
    shipper = webhooks.Shipper(store, "k")
    shipper.start()
    try:
        deadline = time.monotonic() + 10
        while len(got) < 2:
            assert time.monotonic() < deadline, got
            time.sleep(0.05)
        with store.read() as conn:
            assert _webhooks.due_events(conn, 10) == []  # delivered: gone from the outbox
    finally:
        shipper.close()
        server.shutdown()
    assert got == [b'{"n": 1}', b'{"n": 2}']  # in order, once each


def test_a_workspace_webhook_hears_its_projects_experiments_with_their_names(
    tmp_path: pathlib.Path,
) -> None:
    import json

    from determined.master.store import _experiments, _projects

    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    with store.tx() as conn:
        ws = _projects.insert_workspace(conn, "team", 1)
        proj = _projects.insert_project(conn, name="vision", workspace_id=ws, user_id=1)
        for name, bound in (("ours", ws), ("theirs", 1)):
            _webhooks.insert_webhook(
                conn,
                name=name,
                url=f"http://127.0.0.1:9/{name}",
                webhook_type="DEFAULT",
                mode="WORKSPACE",
                workspace_id=bound,
                triggers=[("EXPERIMENT_STATE_CHANGE", {"state": "COMPLETED"})],
            )
        exp_id = _experiments.insert_experiment(
            conn,
            config={"name": "e"},
            original_config="",
            model_definition=None,
            owner_id=1,
            project_id=proj,
        )
        _experiments.update_experiment(conn, exp_id, state="STATE_COMPLETED")
        webhooks.experiment_state_changed(
            conn, _experiments.require_experiment(conn, exp_id), "http://m"
        )
        [event] = _webhooks.due_events(conn, 10)
    assert event["url"].endswith("/ours")
    payload = json.loads(event["payload"])["event_data"]["experiment"]
    assert (payload["workspace"], payload["project"]) == ("team", "vision")
    store.close()
