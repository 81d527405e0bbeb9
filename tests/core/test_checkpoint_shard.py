"""Sharded checkpoints and shared downloads across real processes
(docs/reference/harness.md §19 items 14, 19, 21), over shared_fs and s3 (moto's server on
127.0.0.1), reporting to a recording master."""

from __future__ import annotations

import json
import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from _kit import checkpoint_scenarios as sc
from _kit import dist_worker as w
from _kit.recording_master import RecordingMaster

from determined.common import storage
from determined.core._checkpoint import CheckpointContext, LocalCheckpointReporter
from determined.core._distributed import DistributedContext

ENV = {"AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def _cfg(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Any:
    if request.param == "shared_fs":
        return str(tmp_path / "base")
    import boto3

    endpoint = request.getfixturevalue("moto_endpoint")
    bucket = "b-" + uuid.uuid4().hex[:12]
    keys = {"aws_access_key_id": "k", "aws_secret_access_key": "s", "region_name": "us-east-1"}
    boto3.client("s3", endpoint_url=endpoint, **keys).create_bucket(Bucket=bucket)
    return {
        "type": "s3",
        "bucket": bucket,
        "endpoint_url": endpoint,
        "access_key": "k",
        "secret_key": "s",
        "prefix": "p",
    }


@pytest.fixture(params=["shared_fs", pytest.param("s3", marks=pytest.mark.slow)])
def cfg(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Any:
    """What the scenarios build storage from: a base path, or an s3 section (slow: the
    processes import boto3; the key s3 cases use ``any_cfg``)."""
    return _cfg(request, tmp_path)


@pytest.fixture(params=["shared_fs", "s3"])
def any_cfg(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Any:
    return _cfg(request, tmp_path)


@pytest.fixture
def master(recording_master: RecordingMaster) -> RecordingMaster:
    recording_master.route("POST", r"/api/v1/checkpoints", {})
    return recording_master


def manager(cfg: Any) -> storage.StorageManager:
    if isinstance(cfg, dict):
        return storage.build(cfg)
    return storage.SharedFSStorageManager(cfg)


def contents(cfg: Any, sid: str, tmp: pathlib.Path) -> dict[str, bytes]:
    dst = tmp / ("check-" + uuid.uuid4().hex[:6])
    manager(cfg).download(sid, dst)
    return {str(p.relative_to(dst)): p.read_bytes() for p in dst.rglob("*") if p.is_file()}


def arg(cfg: Any, master: RecordingMaster | None, tmp: pathlib.Path, **kw: Any) -> dict[str, Any]:
    return {"storage": cfg, "master": master and master.url, "tmp": str(tmp), **kw}


def ok(results: list[Any]) -> list[Any]:
    bad = [r for r in results if isinstance(r, w.Failed)]
    assert not bad, bad
    return results


def reports(master: RecordingMaster) -> list[dict[str, Any]]:
    return [r.body for r in master.find("POST", r"/api/v1/checkpoints")]


def with_tmpdirs(ranks: list[dict[str, Any]], tmp: pathlib.Path) -> list[dict[str, Any]]:
    """Give each fake node its own TMPDIR, as separate machines would have."""
    for kw in ranks:
        node = tmp / f"tmpdir-node{kw['cross_rank']}"
        node.mkdir(exist_ok=True)
        kw["_env"] = {"TMPDIR": str(node)}
    return ranks


# --- sharded upload ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["disjoint", "identical_dup", "shared_dir", "none_for_odd"])
def test_sharded_upload_merges_files_and_metadata(  # §19 item 19
    cfg: Any, master: RecordingMaster, tmp_path: pathlib.Path, case: str
) -> None:
    sids = ok(w.run(sc.sharded_upload, w.layout(2, 2), arg(cfg, master, tmp_path, case=case), ENV))
    assert sids[0] == sids[1]
    got = contents(cfg, sids[0], tmp_path)
    expected = {"r0.bin", "metadata.json"} | ({"r1.bin"} if case != "none_for_odd" else set())
    if case == "identical_dup":
        expected.add("shared.bin")
        assert got["shared.bin"] == b"same everywhere"
    assert set(got) == expected
    meta = json.loads(got["metadata.json"])
    ranks = {"0": 0, "1": 1}
    assert meta == {"steps_completed": 3, "per_rank": ranks}
    (report,) = reports(master)
    assert report["uuid"] == sids[0]
    assert report["metadata"] == meta
    # Deviation (Q2): the reported resources include metadata.json.
    assert set(report["resources"]) == expected | {"common/"}


def test_sharded_upload_with_selectors_on_a_shared_dir(cfg: Any, tmp_path: pathlib.Path) -> None:
    sids = ok(
        w.run(sc.sharded_upload, w.layout(2, 2), arg(cfg, None, tmp_path, case="selector"), ENV)
    )
    assert set(contents(cfg, sids[0], tmp_path)) == {"r0.bin", "r1.bin", "metadata.json"}


@pytest.mark.parametrize(
    "case,chief_message",
    [
        ("different_dup", "files conflicts:\n    shared.bin uploaded by ranks [0, 1]"),
        ("metadata_conflict", "metadata conflicts:\n    /a/b uploaded by ranks [0, 1]"),
        ("all_none", "at least one rank must pass a directory"),
    ],
)  # fmt: skip
def test_sharded_upload_conflicts_raise_everywhere_and_store_nothing(
    cfg: Any, master: RecordingMaster, tmp_path: pathlib.Path, case: str, chief_message: str
) -> None:
    results = w.run(sc.sharded_upload, w.layout(2, 2), arg(cfg, master, tmp_path, case=case), ENV)
    assert all(isinstance(r, w.Failed) and r.kind == "RuntimeError" for r in results), results
    assert "refusing to upload with " + chief_message in results[0].message or (
        case == "all_none" and chief_message in results[0].message
    )
    assert reports(master) == []
    if isinstance(cfg, str):
        assert not pathlib.Path(cfg).exists() or list(pathlib.Path(cfg).iterdir()) == []


def test_non_chief_single_upload_and_store_path_raise(  # §19 item 14
    tmp_path: pathlib.Path,
) -> None:
    results = ok(
        w.run(sc.non_chief_single, w.layout(2, 2), arg(str(tmp_path / "b"), None, tmp_path))
    )
    assert results[0] == "chief"
    assert len(results[1]) == 2
    assert all("non-chief worker (rank=1)" in e for e in results[1])


# --- sharded store_path ------------------------------------------------------------------------


@pytest.mark.parametrize("size,local_size", [(2, 2), (2, 1)])
def test_sharded_store_path(
    any_cfg: Any, master: RecordingMaster, tmp_path: pathlib.Path, size: int, local_size: int
) -> None:
    cfg = any_cfg
    ranks = with_tmpdirs(w.layout(size, local_size), tmp_path)
    results = ok(w.run(sc.sharded_store_path, ranks, arg(cfg, master, tmp_path), ENV))
    sid = results[0][0]
    assert {r[0] for r in results} == {sid}
    assert not any(r[2] for r in results)  # staging directories are gone
    got = contents(cfg, sid, tmp_path)
    assert set(got) == {"r0.bin", "r1.bin", "metadata.json"}
    assert json.loads(got["metadata.json"]) == {"steps_completed": 3, "per_rank": {"0": 0, "1": 1}}
    (report,) = reports(master)
    assert set(report["resources"]) == {"r0.bin", "r1.bin", "metadata.json"}


@pytest.mark.parametrize("fail_rank", [0, 1])
def test_sharded_store_path_failure_commits_and_reports_nothing(
    cfg: Any, master: RecordingMaster, tmp_path: pathlib.Path, fail_rank: int
) -> None:
    a = arg(cfg, master, tmp_path, fail_rank=fail_rank)
    results = w.run(sc.sharded_store_path, w.layout(2, 2), a, ENV)
    assert all(isinstance(r, w.Failed) for r in results), results
    assert results[fail_rank].kind == "ValueError"
    assert reports(master) == []
    if isinstance(cfg, str):
        assert not pathlib.Path(cfg).exists() or list(pathlib.Path(cfg).iterdir()) == []


def test_sharded_store_path_merges_metadata_before_the_body(
    master: RecordingMaster, tmp_path: pathlib.Path
) -> None:
    base = tmp_path / "base"
    results = w.run(
        sc.sharded_store_path, w.layout(2, 2), arg(str(base), master, tmp_path, conflict=1)
    )
    assert all(isinstance(r, w.Failed) and "metadata conflicts" in r.message for r in results)
    assert "/lr uploaded by ranks [0, 1]" in results[0].message
    assert not base.exists()  # no staging directory was even created
    assert reports(master) == []


# --- shared restore / download -----------------------------------------------------------------


def saved(cfg: Any) -> str:
    """A checkpoint with one file per rank, written from the test process."""
    single = DistributedContext(
        rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1
    )
    ckpt = CheckpointContext(single, manager(cfg), LocalCheckpointReporter())
    with ckpt.store_path({"steps_completed": 1}) as (path, sid):
        for r in range(4):
            (path / f"r{r}.bin").write_bytes(bytes([r]))
    return sid


def test_shared_restore_path(any_cfg: Any, tmp_path: pathlib.Path) -> None:
    cfg = any_cfg
    sid = saved(cfg)
    ranks = with_tmpdirs(w.layout(4, 2), tmp_path)
    results = ok(w.run(sc.shared_restore, ranks, arg(cfg, None, tmp_path, sid=sid), ENV))
    names = ["metadata.json", "r0.bin", "r1.bin", "r2.bin", "r3.bin"]
    assert all(r[1] == names for r in results)
    paths = [r[0] for r in results]
    assert paths[0] == paths[1] and paths[2] == paths[3]  # one fetch per node
    if isinstance(cfg, str):
        assert set(paths) == {str(pathlib.Path(cfg) / sid)}  # shared_fs: in place
    else:
        assert paths[0] != paths[2]
        assert not any(pathlib.Path(p).exists() for p in paths)  # temporary copies removed


def test_shared_restore_fetches_the_union_of_selections(cfg: Any, tmp_path: pathlib.Path) -> None:
    if isinstance(cfg, str):
        pytest.skip("shared_fs reads in place and ignores selectors")
    sid = saved(cfg)
    a = arg(cfg, None, tmp_path, sid=sid, select=True)
    results = ok(w.run(sc.shared_restore, w.layout(2, 2), a, ENV))
    assert all(r[1] == ["metadata.json", "r0.bin", "r1.bin"] for r in results)


def test_shared_restore_of_a_missing_id_raises_on_every_rank(
    cfg: Any, tmp_path: pathlib.Path
) -> None:
    """Deviation: the local chief's error reaches its workers (the reference's would hang)."""
    a = arg(cfg, None, tmp_path, sid=str(uuid.uuid4()))
    results = ok(w.run(sc.shared_restore, w.layout(2, 2), a, ENV))
    assert all(r.startswith("CheckpointNotFound") for r in results), results


@pytest.mark.parametrize("mode", ["LOCAL_WORKERS_SHARE_DOWNLOAD", "NO_SHARED_DOWNLOAD"])
def test_download_modes(cfg: Any, tmp_path: pathlib.Path, mode: str) -> None:
    sid = saved(cfg)
    results = ok(
        w.run(sc.shared_download, w.layout(2, 2), arg(cfg, None, tmp_path, sid=sid, mode=mode), ENV)
    )
    names = ["metadata.json", "r0.bin", "r1.bin", "r2.bin", "r3.bin"]
    if mode == "NO_SHARED_DOWNLOAD":
        assert results == [names, names]
        assert sorted(p.name for p in (tmp_path / "dl-node0").iterdir()) == ["rank0", "rank1"]
    else:
        assert results == [names, names]
