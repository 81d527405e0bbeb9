"""Two real processes training with DDP over gloo on CPU
(docs/reference/harness.md §10 wrap_model, §12 metrics)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from _kit.master import free_port

pytestmark = pytest.mark.e2e

WORKER = pathlib.Path(__file__).parents[1] / "_kit" / "ddp_worker.py"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("ddp")
    base = {k: v for k, v in os.environ.items() if not k.startswith("DET_") and k != "RANK"}
    base.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2",
        GROUP_RANK="0",
        GROUP_WORLD_SIZE="1",
        USE_TORCH_DISTRIBUTED="1",
        INTER_TRAIN_PROCESS_COMM_PORT_1=str(free_port()),
        INTER_TRAIN_PROCESS_COMM_PORT_2=str(free_port()),
        DET_HOME=str(tmp / "det_home"),
        OMP_NUM_THREADS="1",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(tmp / f"rank{r}.json")],
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
        )
        for r in range(2)
    ]
    for p in procs:
        assert p.wait(timeout=240) == 0
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(2)]


def test_models_are_ddp_and_ranks_stay_in_sync(ranks: list[dict[str, Any]]) -> None:
    """§10 wrap_model: with 2 ranks and USE_TORCH_DISTRIBUTED the model is DDP-wrapped;
    the ranks end with identical weights and each sees batch indices 0..9."""
    for r in ranks:
        assert r["straight"]["ddp"] is True
        assert r["straight"]["events"] == list(range(10))
    assert ranks[0]["straight"]["params"] == ranks[1]["straight"]["params"]


def test_the_ddp_wrapper_passes_attribute_lookups_to_the_model(ranks: list[dict[str, Any]]) -> None:
    """0.37's wrap_model: ``self.model.<attr>`` of the wrapped module works under DDP, also in
    ``evaluate_batch`` (the worker's trial reads ``self.model`` submodules there)."""
    for r in ranks:
        assert r["straight"]["weight_via_wrapper"] == r["straight"]["weight"]
        validations = r["straight"]["validation"]
        assert validations and all("weight_sum" in v for v in validations), validations


def test_training_metrics_are_averaged_across_ranks(ranks: list[dict[str, Any]]) -> None:
    """§12 training metric aggregation: every rank gets the chief's dict (broadcast); each
    batch's loss is the mean over ranks, and avg is the mean over batches."""
    a, b = ranks[0]["straight"]["training"], ranks[1]["straight"]["training"]
    assert a == b and len(a) == 2
    for avg, batches in a:
        assert len(batches) == 5
        assert avg["loss"] == pytest.approx(np.mean([x["loss"] for x in batches]))


def test_validation_avg_is_weighted_by_batch_count(ranks: list[dict[str, Any]]) -> None:
    """§19 item 50: 3 validation batches over 2 ranks (2 + 1): AVG is weighted by batch count,
    which equals the mean over all batches; the chief reports it and every rank sees it
    (a callback overrides on_validation_end)."""
    v0, v1 = ranks[0]["straight"]["val_batches"][0], ranks[1]["straight"]["val_batches"][0]
    assert (len(v0), len(v1)) == (2, 1)
    expected = np.mean(v0 + v1)
    assert ranks[0]["straight"]["validation"][0]["val_loss"] == pytest.approx(expected)
    assert ranks[1]["straight"]["validation"] == ranks[0]["straight"]["validation"]


def test_checkpoint_uuid_everywhere_write_end_on_chief(ranks: list[dict[str, Any]]) -> None:
    """§19 item 65: on_checkpoint_write_end runs on the chief only; upload_end gets the same
    uuid on every rank."""
    assert ranks[0]["straight"]["uuids"] == ranks[1]["straight"]["uuids"]
    assert len(ranks[0]["straight"]["uuids"]) == 2  # validations at 5 and 10: policy "all"
    assert ranks[0]["straight"]["write_end"] == 2 and ranks[1]["straight"]["write_end"] == 0


def test_two_rank_exact_resume(ranks: list[dict[str, Any]]) -> None:
    """Exact resume with 2 ranks (§19 items 58, 59): 4 + resume to 10 gives bitwise the same
    weights as 10 straight; each rank's first resumed index is 4."""
    for r in ranks:
        assert r["resumed"]["events"] == list(range(4, 10))
        assert r["resumed"]["params"] == r["straight"]["params"]


def test_two_rank_exact_resume_with_async_checkpoints(ranks: list[dict[str, Any]]) -> None:
    """Asynchronous checkpoints with 2 ranks (issue #19): checkpoints at 2 and 4 reach every
    rank's on_checkpoint_upload_end with the same uuids; 4 + resume to 10 is bitwise the
    same as 10 straight (each rank's RNG state came back from the chief's files)."""
    assert ranks[0]["a_first"]["uuids"] == ranks[1]["a_first"]["uuids"]
    assert len(ranks[0]["a_first"]["uuids"]) == 2
    for r in ranks:
        assert r["a_resumed"]["events"] == list(range(4, 10))
        assert r["a_resumed"]["params"] == r["straight"]["params"]


def test_two_rank_exact_resume_with_workers_at_an_epoch_end(ranks: list[dict[str, Any]]) -> None:
    """Exact resume, 2 ranks, num_workers=2, resumed at the end of an epoch (5 batches per
    rank): bitwise the same weights as a straight run."""
    for r in ranks:
        assert r["w_resumed"]["events"] == [5, 6, 7]
        assert r["w_resumed"]["params"] == r["w_straight"]["params"]


def test_aggregation_with_ddp_matches_one_big_batch(ranks: list[dict[str, Any]]) -> None:
    """§19 item 39 with DDP: aggregation 2 over 2 ranks (no_sync on the first batch of each
    window, averaged gradients) equals plain SGD on 16-record batches: 4 per-rank batches are
    2 steps over records 0-15 and 16-31."""
    import torch
    from _kit.pytorch_trials import Regression

    torch.manual_seed(0)
    data = Regression(36, seed=0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.0), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for start in (0, 16):
        x, y = data.x[start : start + 16], data.y[start : start + 16]
        torch.nn.functional.mse_loss(model(x).squeeze(-1), y).backward()
        opt.step()
        opt.zero_grad()
    expected = [p.detach().flatten().tolist() for p in model.parameters()]
    for r in ranks:
        assert r["agg"]["events"] == [0, 1, 2, 3]
        for got, want in zip(r["agg"]["params"], expected, strict=True):
            assert got == pytest.approx(want, abs=1e-6)


def test_local_run_with_two_ranks_needs_use_torch_distributed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A local fit() with a 2-rank DistributedContext but no USE_TORCH_DISTRIBUTED raises
    ValueError on every rank, naming the variable, before any batch is trained."""
    import threading

    from _kit.pytorch_trials import MLPTrial

    import determined.pytorch as det_torch
    from determined import core

    monkeypatch.delenv("USE_TORCH_DISTRIBUTED", raising=False)
    pub, pull = free_port(), free_port()
    outcome: dict[int, Any] = {}

    def rank(r: int) -> None:
        dist = core.DistributedContext(
            rank=r, size=2, local_rank=r, local_size=2, cross_rank=0, cross_size=1,
            pub_port=pub, pull_port=pull, timeout=20,
        )  # fmt: skip
        events: list[Any] = []
        try:
            with det_torch.init(hparams={"n": 8}, distributed=dist) as ctx:
                trial = MLPTrial(ctx, events)
                det_torch.Trainer(trial, ctx).fit(max_length=det_torch.Batch(2))
            outcome[r] = "returned"
        except ValueError as e:
            outcome[r] = (str(e), list(events))
        finally:
            dist.close()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert set(outcome) == {0, 1}, outcome
    for message, events in outcome.values():
        assert "USE_TORCH_DISTRIBUTED" in message
        assert events == []
