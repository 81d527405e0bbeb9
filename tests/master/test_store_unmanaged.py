"""determined/master/store/_unmanaged.py's last activity on SQLite and PostgreSQL: which
running unmanaged trials have been silent, and migration 0022 giving the trials of an older
database a fresh last activity (a full timeout to speak after the upgrade)."""

from __future__ import annotations

import datetime
import pathlib

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from determined.master.store import State, Store, _experiments, _time, _trials, _unmanaged
from determined.master.store._engine import _MIGRATIONS
from determined.master.store._schema import unmanaged_trials

pytestmark = pytest.mark.both_stores


def _url(db_url: str | None, tmp_path: pathlib.Path) -> str:
    return db_url or f"sqlite:///{tmp_path / 'm.db'}"


def _unmanaged_trial(conn: sa.Connection, *, run_id: int, state: State = State.ACTIVE) -> int:
    exp_id = _experiments.insert_experiment(
        conn, config={}, original_config="", model_definition=None, owner_id=1
    )
    _unmanaged.mark_experiment(conn, exp_id, None)
    trial_id = _trials.insert_trial(
        conn, experiment_id=exp_id, request_id=f"r{exp_id}", hparams={}, seed=0, state=state
    )
    _trials.update_trial(conn, trial_id, run_id=run_id)
    _unmanaged.add_trial(conn, trial_id, exp_id, None)
    return trial_id


def _set_activity(conn: sa.Connection, trial_id: int, when: datetime.datetime | None) -> None:
    conn.execute(
        unmanaged_trials.update()
        .where(unmanaged_trials.c.trial_id == trial_id)
        .values(last_activity=when)
    )


def test_silent_trials_are_the_running_ones_that_said_nothing_since(
    tmp_path: pathlib.Path, db_url: str | None
) -> None:
    store = Store(_url(db_url, tmp_path))
    old = _time.now() - datetime.timedelta(minutes=10)
    with store.tx() as conn:
        silent = _unmanaged_trial(conn, run_id=1)
        _set_activity(conn, silent, old)
        spoke = _unmanaged_trial(conn, run_id=1)
        _unmanaged.touch_trial(conn, spoke)
        unstarted = _unmanaged_trial(conn, run_id=0)
        _set_activity(conn, unstarted, old)
        ended = _unmanaged_trial(conn, run_id=1, state=State.COMPLETED)
        _set_activity(conn, ended, old)
        never = _unmanaged_trial(conn, run_id=1)  # no activity recorded: not judged
    since = _time.now() - datetime.timedelta(minutes=5)
    with store.read() as conn:
        assert _unmanaged.silent_trials(conn, since) == [silent]
        last = _unmanaged.last_activity(conn, silent)
        assert last is not None and abs((last - old).total_seconds()) < 1e-3
        touched = _unmanaged.last_activity(conn, spoke)
        assert touched is not None and touched > since
        assert _unmanaged.last_activity(conn, never) is None
    store.close()


def test_upgrading_to_0022_gives_existing_trials_a_fresh_last_activity(
    tmp_path: pathlib.Path, db_url: str | None
) -> None:
    url = _url(db_url, tmp_path)
    store = Store(url)
    with store.tx() as conn:
        trial_id = _unmanaged_trial(conn, run_id=3)
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0021")  # as a database written before 0022
    before = _time.now()
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0022")
    with store.read() as conn:
        last = _unmanaged.last_activity(conn, trial_id)
    assert last is not None and last >= before - datetime.timedelta(seconds=1)
    store.close()
