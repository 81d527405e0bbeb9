"""``det e create --test`` (validate, train one batch in a test experiment, follow it:
Determined's test mode) and ``det t download``; docs/cli.md."""

from __future__ import annotations

import json
import pathlib
import tarfile
from collections.abc import Iterator

import pytest
import requests
import yaml
from _kit.cli import Det
from _kit.master import MasterProcess
from _kit.reference import REF, Ref

from determined.cli import _test_mode

pytestmark = pytest.mark.e2e

TRAIN = """
import determined as det
from determined import core

info = det.get_cluster_info()
with core.init() as ctx:
    for op in ctx.searcher.operations():
        for step in range(1, op.length + 1):
            ctx.train.report_training_metrics(step, {"loss": 1.0 / step})
        ctx.train.report_validation_metrics(op.length, {"loss": 0.5})
        op.report_completed(0.5)
    print("steps trained:", op.length, "lr:", info.trial.hparams["lr"], flush=True)
"""

CONFIG = {
    "name": "try-me",
    "entrypoint": "python3 train.py",
    "max_restarts": 3,
    "searcher": {"name": "random", "metric": "loss", "max_trials": 8, "max_length": 500},
    "hyperparameters": {
        "lr": {"type": "log", "base": 10, "minval": -3, "maxval": -1},
        "layers": {"type": "categorical", "vals": [2, 4]},
        "fixed": 7,
    },
}


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    m = MasterProcess(tmp_path_factory.mktemp("testmode") / "master", cpu_slots=1)
    m.start()
    yield m
    m.stop()


def _model(tmp_path: pathlib.Path, train: str, config: dict) -> tuple[pathlib.Path, pathlib.Path]:
    model = tmp_path / "model"
    model.mkdir()
    (model / "train.py").write_text(train)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(config))
    return cfg, model


def _experiments(master: MasterProcess) -> list[dict]:
    r = master.session().get(master.url + "/api/v1/experiments")
    assert r.status_code == 200, r.text
    return list(r.json()["experiments"])


def test_the_test_config_follows_determined_rules() -> None:
    test = _test_mode.test_config(CONFIG)
    assert test["searcher"] == {"name": "single", "metric": "loss", "max_length": {"batches": 1}}
    assert test["max_restarts"] == 0
    assert test["scheduling_unit"] == 1
    assert test["min_validation_period"] == {"batches": 1}
    assert test["hyperparameters"] == {"lr": 0.001, "layers": 2, "fixed": 7}
    gc = test["checkpoint_storage"]
    assert (gc["save_experiment_best"], gc["save_trial_best"], gc["save_trial_latest"]) == (0, 0, 0)
    assert CONFIG["searcher"]["name"] == "random"  # the input is not changed


def test_a_working_model_passes_and_leaves_no_experiment(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    before = {e["id"] for e in _experiments(master)}
    cfg, model = _model(tmp_path, TRAIN, CONFIG)
    out = Det(tmp_path / "home", master.url).ok("e", "create", str(cfg), str(model), "--test")
    assert "Experiment configuration validation succeeded!" in out
    assert "Model definition test succeeded!" in out
    test_id = int(out.split("Created test experiment ")[1].split()[0])
    assert {e["id"] for e in _experiments(master)} == before  # nothing left in `det e list`
    r = master.session().get(f"{master.url}/api/v1/experiments/{test_id}")
    assert r.status_code == 404


def test_a_failing_model_exits_1_with_its_logs(
    master: MasterProcess, tmp_path: pathlib.Path
) -> None:
    broken = "import sys\nprint('the model is broken', flush=True)\nsys.exit(3)\n"
    cfg, model = _model(tmp_path, broken, CONFIG)
    r = Det(tmp_path / "home", master.url)("e", "create", str(cfg), str(model), "--test")
    assert r.returncode == 1
    assert "the model is broken" in r.stdout
    assert "failed" in r.stderr
    test_id = int(r.stdout.split("Created test experiment ")[1].split()[0])
    assert master.session().get(f"{master.url}/api/v1/experiments/{test_id}").status_code == 404


def test_an_invalid_config_creates_nothing(master: MasterProcess, tmp_path: pathlib.Path) -> None:
    before = len(_experiments(master))
    cfg, model = _model(tmp_path, TRAIN, {**CONFIG, "searcher": {"name": "random"}})
    r = Det(tmp_path / "home", master.url)("e", "create", str(cfg), str(model), "--test")
    assert r.returncode == 1
    assert "searcher" in r.stderr
    assert len(_experiments(master)) == before
    assert requests.get(master.url + "/info", timeout=5).ok


CKPT_TRAIN = """
import determined as det
from determined import core

with core.init() as ctx:
    for op in ctx.searcher.operations():
        for step, loss in ((1, 0.9), (2, 0.2), (3, 0.5)):
            ctx.train.report_validation_metrics(step, {"loss": loss})
            with ctx.checkpoint.store_path({"steps_completed": step}) as (path, _):
                (path / "step.txt").write_text(str(step))
                (path / "extra").mkdir()
                (path / "extra" / "big.bin").write_bytes(bytes(1000))
        op.report_completed(0.5)
"""


def test_trial_download_latest_best_and_uuid(master: MasterProcess, tmp_path: pathlib.Path) -> None:
    """``det t download T --latest|--best|--uuid U``: the chosen checkpoint's files."""
    config = {
        "name": "three-checkpoints",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": 3},
        "checkpoint_storage": {
            "type": "shared_fs",
            "host_path": str(tmp_path / "ckpts"),
            "save_trial_best": 3,
            "save_trial_latest": 3,
        },
    }
    cfg, model = _model(tmp_path, CKPT_TRAIN, config)
    det = Det(tmp_path / "home", master.url)
    out = det.ok("e", "create", str(cfg), str(model), "-f")
    exp_id = int(out.split("Created experiment ")[1].split()[0])
    trials = master.session().get(f"{master.url}/api/v1/experiments/{exp_id}/trials").json()
    trial_id = int(trials["trials"][0]["id"])

    def step_of(*flags: str) -> str:
        dest = tmp_path / "dl" / "-".join(f.strip("-") for f in flags)
        det.ok("t", "download", str(trial_id), *flags, "-o", str(dest), "-q")
        return (dest / "step.txt").read_text()

    assert step_of("--latest") == "3"
    assert step_of("--best") == "2"  # loss 0.2
    ckpts = master.session().get(f"{master.url}/api/v1/trials/{trial_id}/checkpoints").json()
    first = next(c for c in ckpts["checkpoints"] if c["metadata"]["steps_completed"] == 1)
    assert step_of("--uuid", first["uuid"]) == "1"
    r = det("t", "download", str(trial_id), "--uuid", "no-such-uuid")
    assert r.returncode == 1 and "has no checkpoint no-such-uuid" in r.stderr

    # det e download: the best N by the searcher metric, or by another metric and order.
    top = tmp_path / "exp-dl"
    paths = det.ok("e", "download", str(exp_id), "-o", str(top), "--top-n", "2", "-q").split()
    assert [(pathlib.Path(p) / "step.txt").read_text() for p in paths] == ["2", "3"]
    worst = det.ok(
        "e", "download", str(exp_id), "-o", str(top / "w"),
        "--sort-by", "loss", "--smaller-is-better", "false",
    )  # fmt: skip
    assert "Local checkpoint path:" in worst and first["uuid"] in worst
    half = det("e", "download", str(exp_id), "--sort-by", "loss")
    assert half.returncode == 1 and "must be given together" in half.stderr
    if (REF / "bin" / "det").exists():
        ref = Ref(master, tmp_path / "ref")
        ref.env.update(DET_USER="admin")
        out = ref.det("e", "download", str(exp_id), "-o", str(tmp_path / "ref-dl"), "-q")
        got = [line for line in out.splitlines() if line.startswith(str(tmp_path))]
        assert [(pathlib.Path(p) / "step.txt").read_text() for p in got] == ["2"]

    # det t support-bundle: the trial's logs, the master's, the trial and its experiment.
    nowhere = det("t", "support-bundle", str(trial_id), "-o", str(tmp_path / "user"))
    assert nowhere.returncode == 1 and "output directory" in nowhere.stderr
    (tmp_path / "user").mkdir()
    as_user = det.ok("t", "support-bundle", str(trial_id), "-o", str(tmp_path / "user"))
    with tarfile.open(as_user.split("bundle path: ")[1].strip()) as tar:
        logs = next(m for m in tar.getmembers() if m.name.endswith("master_logs.txt"))
        assert b"only admins" in tar.extractfile(logs).read()  # type: ignore[union-attr]
    admin = Det(tmp_path / "admin-home", master.url)
    admin.ok("user", "login", "admin", input="\n")
    said = admin.ok("t", "support-bundle", str(trial_id), "-o", str(tmp_path))
    bundle = pathlib.Path(said.split("bundle path: ")[1].strip())
    assert bundle.name.startswith(f"det-bundle-trial-{trial_id}-") and bundle.parent == tmp_path
    with tarfile.open(bundle) as tar:
        names = {pathlib.PurePath(n).name: n for n in tar.getnames()}
        assert set(names) == {
            "trial_logs.txt", "master_logs.txt", "api_trial_call.json", "api_experiment_call.json",
        }  # fmt: skip
        read = {k: tar.extractfile(v).read().decode() for k, v in names.items()}  # type: ignore[union-attr]
    assert json.loads(read["api_trial_call.json"])["id"] == trial_id
    assert json.loads(read["api_experiment_call.json"])["experiment"]["id"] == exp_id
    assert "could not be read" not in read["master_logs.txt"]  # an admin reads it
    if (REF / "bin" / "det").exists():
        (tmp_path / "ref-dl").mkdir(exist_ok=True)
        out = ref.det("t", "support-bundle", str(trial_id), "-o", str(tmp_path / "ref-dl"))
        assert "bundle path:" in out and list((tmp_path / "ref-dl").glob("det-bundle-trial-*"))

    # det c rm: remove named files; what is left still downloads; naming all deletes.
    def state_and_files(uuid: str) -> tuple[str, set[str]]:
        c = master.session().get(f"{master.url}/api/v1/checkpoints/{uuid}").json()["checkpoint"]
        return c["state"], {k for k in c["resources"] if not k.endswith("/")}

    assert state_and_files(first["uuid"]) == (
        "STATE_COMPLETED",
        {"step.txt", "extra/big.bin", "metadata.json"},
    )
    det.ok("c", "rm", first["uuid"], "--glob", "extra", "--yes")
    assert state_and_files(first["uuid"]) == (
        "STATE_PARTIALLY_DELETED",
        {"step.txt", "metadata.json"},
    )
    assert step_of("--uuid", first["uuid"]) == "1"
    det.ok("c", "rm", first["uuid"], "--glob", "**/*", "--yes")
    assert state_and_files(first["uuid"])[0] == "STATE_DELETED"
    unknown = det("c", "rm", "no-such-uuid", "--glob", "x", "--yes")
    assert unknown.returncode == 1 and "not found: no-such-uuid" in unknown.stderr
    if (REF / "bin" / "det").exists():
        second = next(c for c in ckpts["checkpoints"] if c["metadata"]["steps_completed"] == 2)
        ref.det("c", "rm", second["uuid"], "--glob", "extra/*", "--yes")
        assert state_and_files(second["uuid"]) == (
            "STATE_PARTIALLY_DELETED",
            {"step.txt", "metadata.json"},
        )
