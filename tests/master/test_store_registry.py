"""determined/master/store/_projects.py and _models.py on SQLite and PostgreSQL: the default
workspace and project, an upgrade from 0013 filing old experiments under them, project keys,
version numbering and which checkpoints count as registered."""

from __future__ import annotations

import pathlib

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from determined.master._errors import Conflict, FailedPrecondition, NotFound
from determined.master.store import (
    State,
    Store,
    _checkpoints,
    _experiments,
    _models,
    _projects,
    _trials,
)
from determined.master.store._engine import _MIGRATIONS, make_engine

pytestmark = pytest.mark.both_stores


def _url(db_url: str | None, tmp_path: pathlib.Path) -> str:
    return db_url or f"sqlite:///{tmp_path / 'm.db'}"


def _checkpoint(conn: sa.Connection, uuid: str) -> None:
    exp_id = _experiments.insert_experiment(
        conn, config={}, original_config="", model_definition=None, owner_id=1
    )
    trial_id = _trials.insert_trial(
        conn, experiment_id=exp_id, request_id=uuid, hparams={}, seed=0, state=State.ACTIVE
    )
    _checkpoints.insert(
        conn,
        uuid=uuid,
        task_id=_trials.require_trial(conn, trial_id)["task_id"],
        allocation_id=None,
        trial_id=trial_id,
        report_time=None,
        resources={"a": "1"},
        metadata={"steps_completed": 1},
        storage=None,
    )


def test_upgrade_from_0013_files_old_experiments_in_the_default_project(
    tmp_path: pathlib.Path, db_url: str | None
) -> None:
    url = _url(db_url, tmp_path)
    engine = make_engine(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0013")
        conn.execute(
            sa.text(
                "INSERT INTO users (username, admin, active, modified_at) "
                "VALUES ('admin', true, true, CURRENT_TIMESTAMP)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO experiments (state, config, original_config, owner_id, archived, "
                "notes, start_time) VALUES ('STATE_PAUSED', '{}', '', 1, false, '', "
                "CURRENT_TIMESTAMP)"
            )
        )
    engine.dispose()
    store = Store(url)
    with store.read() as conn:
        exp = _experiments.require_experiment(conn, 1)
        assert exp["project_id"] == 1
        project = _projects.require_project(conn, 1)
        assert (project["name"], project["workspace_id"], project["immutable"]) == (
            "Uncategorized",
            1,
            True,
        )
        assert _projects.require_workspace(conn, 1)["name"] == "Uncategorized"
    with store.tx() as conn:
        ws = _projects.insert_workspace(conn, "next", 1)
        assert ws == 2  # the sequence moved past the seeded rows (PostgreSQL)
    store.close()


def test_projects_keys_names_and_open_projects(tmp_path: pathlib.Path, db_url: str | None) -> None:
    store = Store(_url(db_url, tmp_path))
    with store.tx() as conn:
        ws = _projects.insert_workspace(conn, "w", 1)
        a = _projects.insert_project(conn, name="my model!", workspace_id=ws, user_id=1)
        b = _projects.insert_project(conn, name="mymodel", workspace_id=ws, user_id=1)
        assert (
            _projects.require_project(conn, a)["key"],
            _projects.require_project(conn, b)["key"],
        ) == (
            "MYMOD",
            "MYMOD1",
        )
        with pytest.raises(Conflict):
            _projects.insert_project(conn, name="mymodel", workspace_id=ws, user_id=1)
        with pytest.raises(Conflict):
            _projects.insert_workspace(conn, "w", 1)
        _projects.update_workspace(conn, ws, archived=True)
        with pytest.raises(FailedPrecondition):
            _projects.open_project(conn, a)
        with pytest.raises(NotFound):
            _projects.open_project(conn, 99)
        assert _projects.open_project(conn, 1)["id"] == 1
        assert _projects.workspace_counts(conn, ws) == (2, 0)
    store.close()


def test_versions_count_up_and_registered_checkpoints(
    tmp_path: pathlib.Path, db_url: str | None
) -> None:
    store = Store(_url(db_url, tmp_path))
    with store.tx() as conn:
        _checkpoint(conn, "c1")
        _checkpoint(conn, "c2")
        m = _models.insert_model(conn, name="m", user_id=1, workspace_id=1, labels=["x"])
        with pytest.raises(Conflict):
            _models.insert_model(conn, name="m", user_id=1, workspace_id=1)
        assert [
            _models.insert_version(conn, model_id=m, checkpoint_uuid=u, user_id=1)
            for u in ("c1", "c1", "c2")
        ] == [1, 2, 3]
        assert _models.registered_uuids(conn) == {"c1", "c2"}
        assert _models.registered_uuids(conn, ["c2", "c3"]) == {"c2"}
        model = _models.require_model(conn, "m")
        assert _models.require_model(conn, str(m))["name"] == "m"  # by id too
        _models.delete_version(conn, int(_models.require_version(conn, model, 3)["id"]))
        assert _models.registered_uuids(conn) == {"c1"}
        assert _models.count_versions(conn, m) == 2
        assert _models.labels_in_use(conn) == ["x"]
        _models.delete_model(conn, m)
        assert _models.registered_uuids(conn) == set()
        assert _models.get_model(conn, "m") is None
    store.close()
