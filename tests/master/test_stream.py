"""0.37's streaming updates (``/stream``) against a real master: 0.37's own
``determined.common.streams.Stream`` subscribes to projects and models, gets the sync markers
with its sync ids, the rows that exist, then live upserts and deletions as the reference SDK
changes them; a second subscription on the same stream replaces the first. Experiments, trials
and metrics (which 0.37's client cannot name) are read with a plain websocket client."""

from __future__ import annotations

import json
import pathlib
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from _kit.master import MasterProcess
from _kit.reference import REF, Ref
from _kit.trial_cluster import Cluster, config
from hypothesis import given
from hypothesis import strategies as st

from determined.master.api._stream import parse_startup, range_decode, range_encode

REF_STREAM = r"""
import json, sys, threading, time
from determined.common import streams
from determined.common.api import authentication, bindings
from determined.common.streams._client import ModelSpec  # not re-exported by 0.37

url = sys.argv[1]
sess = authentication.login(url, "admin", "")
threading.Timer(60, lambda: (print(json.dumps({"error": "timeout"}), flush=True),
                             __import__("os")._exit(1))).start()
sys.excepthook = lambda *a: (__import__("traceback").print_exception(*a), __import__("os")._exit(1))
# A workspace with one project (the default workspace takes no new ones, as 0.37).
ws = bindings.post_PostWorkspace(sess, body=bindings.v1PostWorkspaceRequest(name="sw")).workspace
pre = bindings.post_PostProject(
    sess, body=bindings.v1PostProjectRequest(name="pre", workspaceId=ws.id), workspaceId=ws.id
).project
stream = streams.Stream(streams.LomondStreamWebSocket(sess))
stream.subscribe("first", projects=streams.ProjectSpec(workspace_id=ws.id))
events = []

def name(msg):
    if isinstance(msg, streams.Sync):
        return ["sync", msg.sync_id, msg.complete]
    if isinstance(msg, streams.wire.ProjectMsg):
        return ["project", msg.id, msg.name, msg.archived, msg.workspace_id, msg.seq]
    if isinstance(msg, streams.wire.ModelMsg):
        return ["model", msg.id, msg.name, msg.archived, msg.seq]
    if isinstance(msg, streams.wire.DeleteMsg):
        return [type(msg).__name__, msg.keys]
    return ["other", repr(msg)]

def until(pred):
    for msg in stream:
        events.append(name(msg))
        if pred(events[-1]):
            return events[-1]

until(lambda e: e[:3] == ["sync", "first", True])
created = bindings.post_PostProject(
    sess, body=bindings.v1PostProjectRequest(name="streamed", workspaceId=ws.id), workspaceId=ws.id
).project
until(lambda e: e[0] == "project" and e[2] == "streamed")
bindings.post_ArchiveProject(sess, id=created.id)
until(lambda e: e[0] == "project" and e[2] == "streamed" and e[3])
bindings.delete_DeleteProject(sess, id=created.id)
until(lambda e: e[0] == "ProjectsDeleted")
# A new subscription: models instead of projects.
bindings.post_PostModel(sess, body=bindings.v1PostModelRequest(name="m-before"))
stream.subscribe("second", models=ModelSpec(workspace_id=1))
until(lambda e: e[:3] == ["sync", "second", True])
bindings.post_PostModel(sess, body=bindings.v1PostModelRequest(name="m-live"))
until(lambda e: e[0] == "model" and e[2] == "m-live")
stream.close()
print(json.dumps({"events": events, "project": created.id, "ws": ws.id, "pre": pre.id}), flush=True)
__import__("os")._exit(0)
"""


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    m = MasterProcess(tmp_path_factory.mktemp("stream") / "master", cpu_slots=1)
    m.start()
    yield m
    m.stop()


@pytest.mark.e2e
@pytest.mark.skipif(not REF.exists(), reason="no .refvenv: run scripts/setup.sh --tests")
def test_reference_stream_client_gets_syncs_and_live_updates(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    out = Ref(master, tmp_path / "home").python(REF_STREAM)
    events, pid = out["events"], out["project"]
    assert events[0] == ["sync", "first", False]
    first_done = events.index(["sync", "first", True])
    # The projects that existed: the workspace's "pre".
    initial = [e for e in events[:first_done] if e[0] == "project"]
    assert [(e[1], e[2], e[4]) for e in initial] == [(out["pre"], "pre", out["ws"])]
    live = [e for e in events[first_done:] if e[0] == "project" and e[1] == pid]
    assert [e[3] for e in live[:1]] == [False] and live[-1][3] is True
    assert live[-1][5] > live[0][5] > initial[0][5]  # seq rises with each change
    assert ["ProjectsDeleted", str(pid)] in events
    # The second subscription: starts with its own sync, no more project messages, and
    # the model made before its sync came in it; the later one came live.
    second = events.index(["sync", "second", False])
    after = events[second:]
    assert all(e[0] != "project" for e in after), after
    done = after.index(["sync", "second", True])
    assert [e[2] for e in after[:done] if e[0] == "model"] == ["m-before"]
    assert [e[2] for e in after[done:] if e[0] == "model"] == ["m-live"]


def _ws_session(master: MasterProcess, startup: dict[str, Any], until: Any) -> list[Any]:
    """Open /stream with lomond (0.37's websocket library, in our venv as websocket-client),
    send ``startup``, collect the JSON messages until ``until(messages)``."""
    import websocket  # websocket-client

    token = master.session().headers["Authorization"]
    ws = websocket.create_connection(
        master.url.replace("http", "ws", 1) + "/stream",
        header=[f"Authorization: {token}"],
        timeout=60,
    )
    try:
        ws.send(json.dumps(startup))
        got: list[Any] = []
        while not until(got):
            got.append(json.loads(ws.recv()))
        return got
    finally:
        ws.close()


@pytest.mark.e2e
def test_experiments_trials_and_metrics_stream_live(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    cluster = Cluster(master)
    exp_id = cluster.create(config(tmp_path / "out", max_length=3, sleep=0.3), activate=False)
    startup = {
        "sync_id": "x",
        "subscribe": {
            "experiments": {"experiment_ids": [exp_id]},
            "trials": {"experiment_ids": [exp_id]},
            "metrics": {"experiment_ids": [exp_id]},
        },
    }

    def completed(got: list[Any]) -> bool:
        return any(m.get("experiment", {}).get("state") == "STATE_COMPLETED" for m in got) and (
            sum("metric" in m for m in got) >= 4  # 3 training + 1 validation
        )

    threading.Timer(1.0, lambda: cluster.post(f"/api/v1/experiments/{exp_id}/activate")).start()
    got = _ws_session(master, startup, completed)
    assert got[0] == {"sync_id": "x", "complete": False}
    done = got.index({"sync_id": "x", "complete": True})
    # Before the sync ended: the paused experiment and its trial as they were.
    assert [m["experiment"]["state"] for m in got[:done] if "experiment" in m] == ["STATE_PAUSED"]
    assert [m["trial"]["experiment_id"] for m in got[:done] if "trial" in m] == [exp_id]
    states = [m["experiment"]["state"] for m in got[done:] if "experiment" in m]
    assert states[0] == "STATE_ACTIVE" and states[-1] == "STATE_COMPLETED"
    metrics = [m["metric"] for m in got if "metric" in m]
    training = sorted(m["total_batches"] for m in metrics if m["metric_group"] == "training")
    assert training == [1, 2, 3]
    assert {m["trial_id"] for m in metrics} == {cluster.trials(exp_id)[0]["id"]}
    seqs = [m[k]["seq"] for m in got for k in m if k in ("experiment", "trial", "metric")]
    assert all(isinstance(s, int) for s in seqs)

    # Reconnecting with what it knows: nothing comes again but what changed since.
    newest = max(seqs)
    again = {
        "sync_id": "y",
        "known": {"experiments": str(exp_id), "trials": "", "metrics": ""},
        "subscribe": {"experiments": {"experiment_ids": [exp_id], "since": newest}},
    }
    got = _ws_session(master, again, lambda g: {"sync_id": "y", "complete": True} in g)
    assert got == [{"sync_id": "y", "complete": False}, {"sync_id": "y", "complete": True}]
    # Known ids that no longer match are deleted; unknown kinds are refused.
    gone = {
        "sync_id": "z",
        "known": {"experiments": "999-1000"},
        "subscribe": {"experiments": {"experiment_ids": [exp_id], "since": newest}},
    }
    got = _ws_session(master, gone, lambda g: {"sync_id": "z", "complete": True} in g)
    assert {"experiments_deleted": "999-1000"} in got


@pytest.mark.e2e
def test_stream_needs_a_login(master: MasterProcess) -> None:
    r = requests.get(
        master.url + "/stream",
        headers={
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        },
        timeout=10,
    )
    assert r.status_code == 403, r.text


@given(st.sets(st.integers(min_value=0, max_value=500)))
def test_range_encoding_round_trips(ids: set[int]) -> None:
    text = range_encode(ids)
    assert range_decode(text) == ids
    assert "--" not in text and (text == "" or not text.startswith(","))


def test_bad_startup_messages_say_what_to_fix() -> None:
    with pytest.raises(ValueError, match="cannot subscribe to 'checkpoints'"):
        parse_startup({"subscribe": {"checkpoints": {}}})
    with pytest.raises(ValueError, match="projects.project_ids must be a list"):
        parse_startup({"subscribe": {"projects": {"project_ids": "1"}}})
    with pytest.raises(ValueError, match="known.projects"):
        parse_startup({"subscribe": {}, "known": {"projects": "a-b"}})
    sync, known, specs = parse_startup(
        {"sync_id": "1", "known": {"models": "1-2"}, "subscribe": {"models": {"model_ids": [3]}}}
    )
    assert (sync, known) == ("1", {"models": {1, 2}})
    assert specs["models"]["ids"] == {"workspace_ids": None, "model_ids": [3], "user_ids": None}


REF_RECONNECT = r"""
import json, sys, threading
from determined.common import streams
from determined.common.api import authentication

sess = authentication.login(sys.argv[1], "admin", "")
threading.Timer(90, lambda: __import__("os")._exit(3)).start()
stream = streams.Stream(streams.LomondStreamWebSocket(sess))
stream.subscribe("only", projects=streams.ProjectSpec(workspace_id=int(sys.argv[2])))
seen = []
for msg in stream:
    if isinstance(msg, streams.Sync):
        seen.append(["sync", msg.sync_id, msg.complete])
        if msg.complete:
            print("ready", flush=True)
    elif isinstance(msg, streams.wire.ProjectMsg):
        seen.append(["project", msg.name])
        if msg.name == "after-restart":
            break
print(json.dumps(seen), flush=True)
__import__("os")._exit(0)
"""


@pytest.mark.e2e
@pytest.mark.skipif(not REF.exists(), reason="no .refvenv: run scripts/setup.sh --tests")
def test_reference_client_resumes_across_a_master_restart(tmp_path: pathlib.Path) -> None:
    """A stopping master closes its streams at once (1001); 0.37's client reconnects to the
    restarted master by itself, resubscribes with what it knows, and gets what changed."""
    master = MasterProcess(tmp_path / "master")
    master.start()
    ref = Ref(master, tmp_path / "home")
    # A workspace of its own: the default one takes no new projects (0.37).
    made = master.session().post(master.url + "/api/v1/workspaces", json={"name": "streamed"})
    assert made.status_code == 200, made.text
    ws_id = int(made.json()["workspace"]["id"])
    proc = subprocess.Popen(
        [str(REF / "bin" / "python"), "-c", REF_RECONNECT, master.url, str(ws_id)],
        cwd=ref.home, env=ref.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        started = time.monotonic()
        master.stop()
        assert time.monotonic() - started < 8  # the open stream did not hold the shutdown
        master.start()
        s = master.session()
        r = s.post(
            master.url + f"/api/v1/workspaces/{ws_id}/projects",
            json={"name": "after-restart", "workspaceId": ws_id},
        )
        assert r.status_code == 200, r.text
        out, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
        master.stop()
    assert proc.returncode == 0, err
    seen = json.loads(out.strip().splitlines()[-1])
    # One sync as the client's user sees it, however many reconnects happened underneath.
    assert seen[0] == ["sync", "only", False] and seen.count(["sync", "only", True]) == 1
    assert seen[-1] == ["project", "after-restart"]


def _wsproto_sync(master: MasterProcess, startup: dict[str, Any], compress: bool) -> Any:
    """A sync read over a raw socket by a wsproto client, offering permessage-deflate or no
    extension: ``(whether the master took the extension, the JSON messages)``."""
    import socket
    import urllib.parse

    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, Message, Request, TextMessage
    from wsproto.extensions import PerMessageDeflate

    where = urllib.parse.urlsplit(master.url)
    token = master.session().headers["Authorization"]
    client = WSConnection(ConnectionType.CLIENT)
    got: list[Any] = []
    accepted = None
    text = ""
    with socket.create_connection((where.hostname, where.port), timeout=60) as sock:
        sock.sendall(
            client.send(
                Request(
                    host=f"{where.hostname}:{where.port}",
                    target="/stream",
                    extensions=[PerMessageDeflate()] if compress else [],
                    extra_headers=[(b"authorization", token.encode())],
                )
            )
        )
        while {"sync_id": startup["sync_id"], "complete": True} not in got:
            data = sock.recv(65536)
            assert data, "the master closed the stream"
            client.receive_data(data)
            for event in client.events():
                if isinstance(event, AcceptConnection):
                    accepted = [e.name for e in event.extensions]
                    sock.sendall(client.send(Message(data=json.dumps(startup))))
                elif isinstance(event, TextMessage):
                    text += event.data
                    if event.message_finished:
                        got.append(json.loads(text))
                        text = ""
    return accepted, got


@pytest.mark.e2e
def test_stream_frames_are_the_same_with_and_without_compression(master: MasterProcess) -> None:
    """A client offering no extension gets the master's own text frames
    (``_ws_protocol.text_frame``); one offering permessage-deflate (as browsers do) gets
    wsproto's compressed ones: the same messages either way."""
    s = master.session()
    r = s.post(master.url + "/api/v1/workspaces", json={"name": "frames"})
    assert r.status_code == 200, r.text
    ws_id = r.json()["workspace"]["id"]
    for i in range(3):  # messages of a few hundred bytes: past a frame's 1-byte length
        body = {"name": f"frames-{i}", "description": "x" * 200 * i, "workspaceId": ws_id}
        r = s.post(master.url + f"/api/v1/workspaces/{ws_id}/projects", json=body)
        assert r.status_code == 200, r.text
    startup = {"sync_id": "f", "subscribe": {"projects": {"workspace_ids": [ws_id]}}}
    plain, plain_got = _wsproto_sync(master, startup, compress=False)
    deflated, deflated_got = _wsproto_sync(master, startup, compress=True)
    assert (plain, deflated) == ([], ["permessage-deflate"])
    assert plain_got == deflated_got
    names = [m["project"]["name"] for m in plain_got if "project" in m]
    assert sorted(names) == ["frames-0", "frames-1", "frames-2"]


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 70001])
def test_text_frames_are_wsprotos(size: int) -> None:
    from wsproto.frame_protocol import FrameProtocol

    from determined.master._ws_protocol import text_frame

    text = "é" * (size // 2) + "a" * (size % 2)
    framed = FrameProtocol(client=False, extensions=[]).send_data(text, fin=True)
    assert text_frame(text.encode()) == bytes(framed)
