"""determined.pytorch.experimental.torch_batch_process on a real master: two CPU ranks shard
the dataset, a crashed run restarts from the progress checkpoint and skips finished batches,
a paused job resumes where it stopped (docs/pytorch/batch_processing.md)."""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from _kit.master import MasterProcess, free_port
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e

N_ITEMS, BATCH, INTERVAL = 38, 2, 3  # 19 batches: rank 0 gets 10, rank 1 gets 9 (and a None)

BATCH_PY = r"""
import json, os, pathlib, time
import torch
import determined as det
from determined.pytorch import experimental

info = det.get_cluster_info()
hp = info.trial.hparams
out = pathlib.Path(hp["out"])
run = int(os.environ["DET_TRIAL_RUN_ID"])


class Dataset(torch.utils.data.Dataset):
    def __len__(self):
        return hp["n"]

    def __getitem__(self, i):
        return torch.tensor(i)


class Processor(experimental.TorchBatchProcessor):
    def __init__(self, context):
        self.context = context
        self.rank = context.get_distributed_rank()
        self.total = context.wrap_reducer(sum, name="items_sum")
        self.pending = []

    def process_batch(self, batch, batch_idx):
        if run == 1 and self.rank == 1 and batch_idx == hp.get("crash_at", -1):
            os._exit(3)
        time.sleep(hp.get("sleep", 0))
        items = batch.tolist()
        self.total.update(sum(items))
        self.pending += items
        with open(out / f"rank_{self.rank}.jsonl", "a") as f:
            f.write(json.dumps({"run": run, "idx": batch_idx, "items": items}) + "\n")

    def on_checkpoint_start(self):
        with self.context.upload_path() as path:
            (path / f"items_{len(self.pending)}_{run}.json").write_text(json.dumps(self.pending))
        self.pending = []

    def on_finish(self):
        (out / f"finished_{self.rank}").write_text(str(run))


experimental.torch_batch_process(
    Processor, Dataset(), batch_size=hp["batch"], checkpoint_interval=hp["interval"]
)
"""


def _config(out: pathlib.Path, storage: pathlib.Path, **hp: Any) -> dict[str, Any]:
    return {
        "name": "batch-inference",
        "entrypoint": "python3 -m determined.launch.torch_distributed python3 batch.py",
        "max_restarts": 1,
        "resources": {"slots_per_trial": 2},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage)},
        # Ports of their own: other jobs on this machine may use the default ZMQ ports.
        "environment": {
            "environment_variables": [
                f"INTER_TRAIN_PROCESS_COMM_PORT_1={free_port()}",
                f"INTER_TRAIN_PROCESS_COMM_PORT_2={free_port()}",
            ]
        },
        "searcher": {"name": "single", "metric": "items_sum", "max_length": 1},
        "hyperparameters": {
            "out": str(out),
            "n": N_ITEMS,
            "batch": BATCH,
            "interval": INTERVAL,
            **hp,
        },
    }


def _items(rank: int, idx: int) -> list[int]:
    """The dataset's items in rank ``rank``'s batch ``idx`` (global batch idx*2 + rank)."""
    first = (idx * 2 + rank) * BATCH
    return [i for i in range(first, first + BATCH) if i < N_ITEMS]


def _lines(out: pathlib.Path, rank: int) -> list[dict[str, Any]]:
    text = (out / f"rank_{rank}.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with MasterProcess(tmp_path_factory.mktemp("batch") / "master", cpu_slots=2) as m:
        yield Cluster(m)


def test_a_crashed_run_restarts_after_the_last_checkpoint(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    out, storage = tmp_path / "out", tmp_path / "ckpts"
    out.mkdir()
    exp_id = cluster.create(_config(out, storage, crash_at=7), {"batch.py": BATCH_PY})
    try:
        exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=180)
    except AssertionError:
        [trial] = cluster.trials(exp_id)
        logs = "".join(f"{e.get('rankId')} {e['log']}" for e in cluster.logs(trial["taskId"]))
        files = [(f, f.read_text()) for f in out.iterdir()]
        raise AssertionError(f"{logs[-6000:]}\n{files}") from None
    [trial] = cluster.trials(exp_id)
    logs = "".join(e["log"] for e in cluster.logs(trial["taskId"]))
    assert exp["state"] == "STATE_COMPLETED", logs[-3000:]
    assert trial["restarts"] == 1
    seen: set[int] = set()
    for rank, batches in ((0, 10), (1, 9)):
        lines = _lines(out, rank)
        first = [x["idx"] for x in lines if x["run"] == 1]
        second = [x["idx"] for x in lines if x["run"] == 2]
        # run 1 got past the checkpoint at 6 (rank 1 crashed at 7); run 2 starts at 6
        assert first[:7] == list(range(7)), first
        assert second == list(range(6, batches)), second
        for x in lines:
            assert x["items"] == _items(rank, x["idx"])  # the sharding: batches r, r+2, ...
        seen |= {i for x in lines for i in x["items"]}
        assert (out / f"finished_{rank}").read_text() == "2"
    assert seen == set(range(N_ITEMS))

    # progress checkpoints in 0.37's format; the last one covers every batch of a rank
    ckpts = cluster.get(f"/api/v1/trials/{trial['id']}/checkpoints")["checkpoints"]
    last = max(ckpts, key=lambda c: c["metadata"]["steps_completed"])
    assert last["metadata"]["steps_completed"] == 10
    output_uuid = last["metadata"]["default_output_uuid"]
    assert {c["metadata"]["default_output_uuid"] for c in ckpts} == {output_uuid}
    done = json.loads((storage / last["uuid"] / "batch_completed.json").read_text())
    assert done == {"batch_completed": 10}

    # upload_path() files of both runs accumulate under <output uuid>/rank_<r>/
    for rank in (0, 1):
        files = sorted(p.name for p in (storage / output_uuid / f"rank_{rank}").iterdir())
        uploaded = {
            i
            for f in files
            for i in json.loads((storage / output_uuid / f"rank_{rank}" / f).read_text())
        }
        assert any(f.endswith("_2.json") for f in files) and any(
            f.endswith("_1.json") for f in files
        )
        assert {i for x in _lines(out, rank) if x["run"] == 2 for i in x["items"]} <= uploaded

    # the reducer's sum covers the final run's batches, reported by the chief
    run2 = sum(i for r in (0, 1) for x in _lines(out, r) if x["run"] == 2 for i in x["items"])
    validation = trial["latestValidation"]
    assert validation["totalBatches"] == 10
    assert validation["metrics"]["avgMetrics"] == {"items_sum": run2}
    assert cluster.experiment(exp_id)["progress"] == 1.0


def test_a_paused_job_stops_at_a_checkpoint_and_resumes_there(
    cluster: Cluster, tmp_path: pathlib.Path
) -> None:
    out, storage = tmp_path / "out", tmp_path / "ckpts"
    out.mkdir()
    exp_id = cluster.create(_config(out, storage, sleep=0.2), {"batch.py": BATCH_PY})
    deadline = time.monotonic() + 120
    while not (out / "rank_0.jsonl").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster.post(f"/api/v1/experiments/{exp_id}/pause").status_code == 200
    cluster.wait_experiment(exp_id, "STATE_PAUSED", timeout=60)
    [trial] = cluster.trials(exp_id)
    cluster.wait_log(trial["taskId"], "exited with code 0", timeout=60)  # it acknowledged
    stopped = {r: [x["idx"] for x in _lines(out, r)] for r in (0, 1)}
    # both ranks stop right after the same progress checkpoint, not mid-interval
    assert stopped[0] == stopped[1] == list(range(len(stopped[0])))
    assert len(stopped[0]) % INTERVAL == 0 and len(stopped[0]) < 9, stopped
    assert not (out / "finished_0").exists()

    assert cluster.post(f"/api/v1/experiments/{exp_id}/activate").status_code == 200
    exp = cluster.wait_experiment(exp_id, "STATE_COMPLETED", "STATE_ERROR", timeout=180)
    [trial] = cluster.trials(exp_id)
    assert exp["state"] == "STATE_COMPLETED"
    assert trial["restarts"] == 0  # a preemption is not a failure
    for rank, batches in ((0, 10), (1, 9)):
        idx = [x["idx"] for x in _lines(out, rank)]
        assert idx == list(range(batches))  # each batch once, in order, across the two runs
    seen = {i for r in (0, 1) for x in _lines(out, r) for i in x["items"]}
    assert seen == set(range(N_ITEMS))
