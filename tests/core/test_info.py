"""det.get_cluster_info() and the info objects (docs/reference/harness.md §1; §19 item 1).

Two sources: Determined's ``/run/determined/info/*.json`` files (pointed at a temporary
directory here) and the ``DET_*`` environment that our own master sets.
"""

from __future__ import annotations

import json
import pathlib

import pytest
from _kit.core_env import ALLOCATION_ID, EXPERIMENT_ID, TRIAL_ID, trial_env

import determined as det
from determined import _info


@pytest.fixture
def info_dir(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    d = tmp_path / "info"
    d.mkdir()
    monkeypatch.setattr(_info, "INFO_DIR", str(d))
    return d


def _cluster_json(task_type: str = "TRIAL", **extra: object) -> dict[str, object]:
    return {
        "master_url": "http://127.0.0.1:8080",
        "cluster_id": "c1",
        "agent_id": "a1",
        "slot_ids": [0, 1],
        "task_id": "t1",
        "allocation_id": "t1.1",
        "session_token": "tok",
        "task_type": task_type,
        **extra,
    }


def test_none_without_cluster_json_and_the_none_is_cached(
    info_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert det.get_cluster_info() is None
    # Appearing later changes nothing: the first answer, None included, is kept.
    (info_dir / "cluster.json").write_text(json.dumps(_cluster_json()))
    for k, v in trial_env("http://127.0.0.1:1", info_dir).items():
        monkeypatch.setenv(k, v)
    assert det.get_cluster_info() is None
    _info._reset_cluster_info_cache()
    assert det.get_cluster_info() is not None


def test_first_result_is_cached(info_dir: pathlib.Path) -> None:
    (info_dir / "cluster.json").write_text(json.dumps(_cluster_json("COMMAND")))
    first = det.get_cluster_info()
    assert first is not None
    (info_dir / "cluster.json").unlink()
    assert det.get_cluster_info() is first


def test_files_are_read_with_attribute_names_as_keys(info_dir: pathlib.Path) -> None:
    (info_dir / "cluster.json").write_text(
        json.dumps(_cluster_json(latest_checkpoint="ckpt-uuid", master_cert_name="noverify"))
    )
    (info_dir / "trial.json").write_text(
        json.dumps(
            {
                "trial_id": 5,
                "experiment_id": 2,
                "trial_seed": 9,
                "hparams": {"lr": 0.5},
                "config": {"data": {"x": 1}, "debug": True},
                "steps_completed": 40,
                "trial_run_id": 3,
                "debug": True,
            }
        )
    )
    (info_dir / "rendezvous.json").write_text(
        json.dumps(
            {
                "container_addrs": ["10.0.0.1", "10.0.0.2"],
                "container_rank": 1,
                "container_slot_counts": [2, 2],
            }
        )
    )
    (info_dir / "resources.json").write_text(json.dumps({"gpu_uuids": ["GPU-a", "GPU-b"]}))
    info = det.get_cluster_info()
    assert info is not None
    assert (info.master_url, info.cluster_id, info.agent_id) == (
        "http://127.0.0.1:8080",
        "c1",
        "a1",
    )
    assert (info.slot_ids, info.task_id, info.allocation_id) == ([0, 1], "t1", "t1.1")
    assert (info.session_token, info.task_type, info.master_cert_name) == (
        "tok",
        "TRIAL",
        "noverify",
    )
    assert info.latest_checkpoint == "ckpt-uuid"
    assert info.user_data == {"x": 1}
    assert (info.trial.trial_id, info.trial.experiment_id, info.trial.trial_seed) == (5, 2, 9)
    assert info.trial.hparams == {"lr": 0.5}
    assert (info.trial._steps_completed, info.trial._trial_run_id, info.trial._debug) == (
        40,
        3,
        True,
    )
    assert info.container_addrs == ["10.0.0.1", "10.0.0.2"]
    assert (info.container_rank, info.container_slot_counts) == (1, [2, 2])
    assert info.gpu_uuids == ["GPU-a", "GPU-b"]


def test_to_file_and_from_file_round_trip(info_dir: pathlib.Path) -> None:
    trial = _info.TrialInfo(1, 2, 3, {"h": 1}, {"debug": False}, 4, 5)
    rdzv = _info.RendezvousInfo(["127.0.0.1"], 0, [1])
    res = _info.ResourcesInfo(["GPU-x"])
    cluster = _info.ClusterInfo(
        "http://m", "c", "a", [0], "t", "t.1", "tok", "TRIAL", None, None, "ck", trial, rdzv, res
    )
    for obj in (trial, rdzv, res, cluster):
        obj._to_file()
    assert "trial_info" not in json.loads((info_dir / "cluster.json").read_text())
    assert json.loads((info_dir / "trial.json").read_text())["config"] == {"debug": False}
    back = det.get_cluster_info()
    assert back is not None and back is not cluster
    assert vars(back.trial) == vars(trial)
    assert (back.latest_checkpoint, back.gpu_uuids, back.container_slot_counts) == (
        "ck",
        ["GPU-x"],
        [1],
    )


@pytest.mark.parametrize("task_type", ["COMMAND", "NOTEBOOK", "CHECKPOINT_GC"])
def test_non_trial_tasks(info_dir: pathlib.Path, task_type: str) -> None:
    (info_dir / "cluster.json").write_text(
        json.dumps(_cluster_json(task_type, latest_checkpoint="x"))
    )
    # rendezvous info for several containers is ignored for non-trial tasks
    (info_dir / "rendezvous.json").write_text(
        json.dumps(
            {"container_addrs": ["a", "b"], "container_rank": 1, "container_slot_counts": [1, 1]}
        )
    )
    info = det.get_cluster_info()
    assert info is not None
    with pytest.raises(RuntimeError, match="TRIAL"):
        info.trial  # noqa: B018
    assert info.latest_checkpoint is None
    assert info.user_data == {}
    assert info.container_addrs == ["127.0.0.1"]
    assert info.container_rank == 0
    assert info.container_slot_counts == [2]


def test_trial_from_our_masters_environment(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = trial_env("http://127.0.0.1:1", tmp_path)
    env["DET_LATEST_CHECKPOINT"] = "prev-uuid"
    env["DET_EXPERIMENT_CONFIG"] = json.dumps({"debug": True, "data": {"k": "v"}})
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    info = det.get_cluster_info()
    assert info is not None
    assert (info.allocation_id, info.task_type, info.slot_ids) == (ALLOCATION_ID, "TRIAL", [0])
    assert (info.trial.trial_id, info.trial.experiment_id) == (TRIAL_ID, EXPERIMENT_ID)
    assert (info.trial.trial_seed, info.trial.hparams, info.trial._debug) == (42, {"lr": 0.1}, True)
    assert (info.latest_checkpoint, info.user_data) == ("prev-uuid", {"k": "v"})
    assert (info.container_addrs, info.container_rank, info.container_slot_counts) == (
        ["127.0.0.1"],
        0,
        [1],
    )


@pytest.mark.parametrize("missing", ["DET_MASTER", "DET_SLOT_IDS", "DET_TRIAL_SEED", "DET_HPARAMS"])
def test_a_missing_variable_raises_runtime_error(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    for k, v in trial_env("http://127.0.0.1:1", tmp_path).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv(missing)
    with pytest.raises(RuntimeError, match=missing):
        det.get_cluster_info()


def test_a_cluster_json_that_is_not_an_object_raises(info_dir: pathlib.Path) -> None:
    (info_dir / "cluster.json").write_text("[1, 2]")
    with pytest.raises(RuntimeError, match="JSON object"):
        det.get_cluster_info()
