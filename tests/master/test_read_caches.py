"""What reads remember per process (issue 37 part 2), on SQLite and PostgreSQL: experiment
configs decoded once by their stored text (``_experiments.config_of``), ``/stream``'s
experiment messages' text by their row's values (``_stream.matching``), which ``Stamps``
compares, and their upserts' text (``api._stream._upsert``). A write changes the text or the
row, so the next read sees it; a new process (a restart) starts with nothing remembered and
reads the same."""

from __future__ import annotations

import json
import pathlib

import pytest

from determined.master.api._stream import Stamps, _upsert
from determined.master.store import State, Store, _experiments, _stream

pytestmark = pytest.mark.both_stores

EVERY = {"experiment_ids": None, "project_ids": [1], "workspace_ids": None}


def _url(db_url: str | None, tmp_path: pathlib.Path) -> str:
    return db_url or f"sqlite:///{tmp_path / 'm.db'}"


def _experiment(store: Store, name: str) -> int:
    with store.tx() as conn:
        return _experiments.insert_experiment(
            conn,
            config={"name": name, "searcher": {"name": "single"}},
            original_config=f"name: {name}",
            model_definition=None,
            owner_id=1,
        )


def test_configs_and_stream_messages_follow_writes_and_restarts(
    tmp_path: pathlib.Path, db_url: str | None
) -> None:
    url = _url(db_url, tmp_path)
    store = Store(url)
    a, b = _experiment(store, "a"), _experiment(store, "b")
    stamps = Stamps()
    with store.read() as conn:
        rows = _experiments.experiments_by_id(conn, [a, b])
        first = _stream.matching(conn, "experiments", EVERY)
    assert [rows[a]["config"]["name"], rows[b]["config"]["name"]] == ["a", "b"]
    message = json.loads(first[a])
    assert message["name"] == "a" and message["state"] == State.PAUSED.value
    seqs = stamps.stamp("experiments", first)

    with store.read() as conn:  # nothing written: the same config object and message text
        again = _experiments.experiments_by_id(conn, [a])[a]
        second = _stream.matching(conn, "experiments", EVERY)
    assert again["config"] is rows[a]["config"] and second[a] is first[a]
    assert stamps.stamp("experiments", second) == seqs
    sent = _upsert("experiments", first[a], seqs[a])  # written around the message's text
    assert sent == json.dumps({"experiment": {**message, "seq": seqs[a]}})
    # An equal message written anew (another process's, or after the memo was emptied) keeps
    # its seq too.
    assert stamps.stamp("experiments", {a: json.dumps(message), b: first[b]}) == seqs

    with store.tx() as conn:  # a rename (the config) and a state change (the row)
        config = {**rows[a]["config"], "name": "renamed"}
        _experiments.update_experiment(conn, a, config=config)
        _experiments.update_experiment(conn, b, state=State.ACTIVE)
    with store.read() as conn:
        rows = _experiments.experiments_by_id(conn, [a, b])
        third = _stream.matching(conn, "experiments", EVERY)
    assert rows[a]["config"]["name"] == "renamed" and json.loads(third[a])["name"] == "renamed"
    assert json.loads(third[b])["state"] == State.ACTIVE.value
    changed = stamps.stamp("experiments", third)
    assert changed[a] > seqs[a] and changed[b] > seqs[b]
    renamed = json.loads(_upsert("experiments", third[a], changed[a]))["experiment"]
    assert (renamed["name"], renamed["seq"]) == ("renamed", changed[a])

    # A restart: a fresh process remembers nothing, and reads what was written.
    store.engine.dispose()
    _experiments._CONFIGS.clear()
    _stream._EXPERIMENTS.clear()
    store = Store(url)
    with store.read() as conn:
        rows = _experiments.experiments_by_id(conn, [a, b])
        fourth = _stream.matching(conn, "experiments", EVERY)
    assert rows[a]["config"]["name"] == "renamed" and fourth == third
    assert stamps.stamp("experiments", fourth) == changed
