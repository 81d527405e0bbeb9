"""FSDP2 models in PyTorchTrial (issue #19 item 2, docs/pytorch.md "FSDP2"): real gloo ranks
on CPU; checkpoints in torch.distributed.checkpoint's layout, one shard per rank, loaded back
resharded from 2 ranks to 1 and from 1 to 2."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
from _kit.master import free_port

pytestmark = pytest.mark.e2e

WORKER = pathlib.Path(__file__).parents[1] / "_kit" / "fsdp_worker.py"


def _launch(tmp: pathlib.Path, ranks: int, phase: str, *args: str) -> list[dict[str, Any]]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DET_") and k != "RANK"}
    base.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        WORLD_SIZE=str(ranks),
        LOCAL_WORLD_SIZE=str(ranks),
        GROUP_RANK="0",
        GROUP_WORLD_SIZE="1",
        USE_TORCH_DISTRIBUTED="1",
        INTER_TRAIN_PROCESS_COMM_PORT_1=str(free_port()),
        INTER_TRAIN_PROCESS_COMM_PORT_2=str(free_port()),
        DET_HOME=str(tmp / "det_home"),
        OMP_NUM_THREADS="1",
    )
    outs = [tmp / f"{phase}-{ranks}-{r}.json" for r in range(ranks)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), phase, str(outs[r]), *args],
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
        )
        for r in range(ranks)
    ]
    for p in procs:
        assert p.wait(timeout=240) == 0
    return [json.loads(o.read_text()) for o in outs]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("fsdp")
    two = _launch(tmp, 2, "train")
    uuid2 = two[0]["first"]["uuids"][-1]
    one = _launch(tmp, 1, "train", uuid2)
    uuid1 = one[0]["first"]["uuids"][-1]
    return {
        "tmp": tmp,
        "two": two,
        "one": one,
        "uuid2": uuid2,
        "2to1": one[0]["loaded"],
        "plain": one[0]["plain"],
        "1to2": [r["loaded"] for r in _launch(tmp, 2, "load", uuid1)],
    }


def test_the_model_stays_fsdp_and_parameters_are_sharded(runs: dict[str, Any]) -> None:
    """wrap_model keeps a fully_shard model (no DDP); each of 2 ranks holds part of the
    parameters, and their full tensors agree across ranks."""
    a, b = (r["straight"] for r in runs["two"])
    assert a["fsdp"] and b["fsdp"]
    total = sum(len(p) for p in a["params"])
    assert 0 < a["local_numel"] < total and a["local_numel"] + b["local_numel"] == total
    assert a["params"] == b["params"]


def test_checkpoint_holds_one_dcp_shard_per_rank(runs: dict[str, Any]) -> None:
    """The checkpoint has dcp/.metadata and one .distcp file per rank, in the manifest (so
    verified on restore), and state_dict.pth without the sharded lists."""
    import torch

    path = runs["tmp"] / "det_home" / "checkpoints" / runs["uuid2"]
    names = sorted(p.name for p in (path / "dcp").iterdir())
    assert names == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    manifest = json.loads((path / ".det_manifest.json").read_text())
    assert {"dcp/.metadata", "dcp/__0_0.distcp", "dcp/__1_0.distcp"} <= set(
        manifest.get("files", manifest)
    )
    state = torch.load(path / "state_dict.pth", weights_only=True)
    assert state["models_state_dict"] == [] and state["optimizers_state_dict"] == []


def test_resume_on_2_ranks_equals_a_straight_run(runs: dict[str, Any]) -> None:
    """2 ranks: 4 batches + resume to 8 gives exactly the weights and Adam state of 8."""
    for r in runs["two"]:
        assert r["resumed"]["events"] == [4, 5, 6, 7]
        assert r["resumed"]["params"] == r["straight"]["params"]
        assert r["resumed"]["exp_avg"] == r["straight"]["exp_avg"]


def test_resharding_2_to_1_and_1_to_2(runs: dict[str, Any]) -> None:
    """A 2-rank checkpoint loads on 1 rank (FSDP on a 1-rank group, and a plain model without
    any process group), a 1-rank one on 2 ranks: weights and optimizer state as saved."""
    saved2 = runs["two"][0]["first"]
    for loaded in (runs["2to1"], runs["plain"]):
        assert loaded["events"] == []
        assert loaded["params"] == saved2["params"]
        assert loaded["exp_avg"] == saved2["exp_avg"]
    saved1 = runs["one"][0]["first"]
    for loaded in runs["1to2"]:
        assert loaded["fsdp"] and loaded["events"] == []
        assert loaded["params"] == saved1["params"]
        assert loaded["exp_avg"] == saved1["exp_avg"]


def test_async_checkpoints_with_fsdp_fall_back_to_synchronous(runs: dict[str, Any]) -> None:
    """fit(async_checkpoints=True) with FSDP2 models still writes a complete DCP checkpoint
    (synchronously, with a warning) that every rank hears of."""
    a, b = (r["async"] for r in runs["two"])
    assert a["uuids"] == b["uuids"] and len(a["uuids"]) == 1
    path = runs["tmp"] / "det_home" / "checkpoints" / a["uuids"][0] / "dcp"
    assert sorted(p.name for p in path.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert a["params"] == runs["two"][0]["first"]["params"]
