"""The flags of 0.37's ``det`` that tests/cli/test_command_tree.py found missing, each run
against a master with a finished experiment, beside 0.37's own ``det`` where their output can be
compared (issue #15 items 5 and 7): paging, ``e describe --metrics/--outdir``, ``t describe
--metrics``, ``t download --sort-by``, ``master config|info --json/--yaml``, ``dev auth-token|
curl``, ``e delete-tb-files``, ``user edit|rename|logout --all``, ``-u`` and ``help``."""

from __future__ import annotations

import csv
import io
import json
import pathlib
import shutil
from collections.abc import Iterator

import pytest
from _kit.cli import Det
from _kit.master import MasterProcess
from _kit.reference import REF, Ref
from _kit.trial_cluster import Cluster

pytestmark = pytest.mark.e2e

TRAIN = """
from determined import core

with core.init() as ctx:
    for op in ctx.searcher.operations():
        for step, (loss, acc) in enumerate(((0.9, 0.1), (0.2, 0.8), (0.5, 0.6)), start=1):
            ctx.train.report_training_metrics(step, {"loss": loss * 2, "lr": 0.1})
            ctx.train.report_validation_metrics(step, {"loss": loss, "acc": acc})
            with ctx.checkpoint.store_path({"steps_completed": step}) as (path, _):
                (path / "step.txt").write_text(str(step))
        op.report_completed(0.5)
"""


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, int, int]]:
    root = tmp_path_factory.mktemp("flags")
    with MasterProcess(root / "master", cpu_slots=1) as m:
        cluster = Cluster(m)
        config = {
            "name": "flags",
            "entrypoint": "python3 train.py",
            "searcher": {"name": "single", "metric": "loss", "max_length": 3},
            "checkpoint_storage": {
                "type": "shared_fs",
                "host_path": str(root / "ckpts"),
                "save_trial_best": 3,
                "save_trial_latest": 3,
            },
        }
        exp_id = cluster.create(config, {"train.py": TRAIN})
        cluster.wait_experiment(exp_id, "STATE_COMPLETED", timeout=90)
        second = cluster.create({**config, "name": "second"}, {"train.py": TRAIN}, activate=False)
        [trial] = cluster.trials(exp_id)
        yield cluster, exp_id, int(trial["id"])
        del second


def _csv_rows(text: str) -> list[list[str]]:
    lines = [ln for ln in text.splitlines() if "," in ln and not ln.startswith("Warning")]
    return list(csv.reader(io.StringIO("\n".join(lines))))


def _det(cluster: Cluster, home: pathlib.Path, user: str = "admin") -> Det:
    det = Det(home, cluster.url)
    det.ok("user", "login", user, input="\n")
    return det


def test_paging_and_describe_metrics(
    finished: tuple[Cluster, int, int], tmp_path: pathlib.Path
) -> None:
    cluster, exp_id, trial_id = finished
    det = _det(cluster, tmp_path / "home")
    listed = json.loads(det.ok("e", "list", "--json", "--limit", "1", "--pages", "1"))
    assert len(listed) == 1
    assert len(json.loads(det.ok("e", "list", "--json", "--limit", "1"))) == 2  # every page
    skipped = json.loads(det.ok("e", "list", "--json", "--offset", "1"))
    assert [e["id"] for e in skipped] == [json.loads(det.ok("e", "list", "--json"))[1]["id"]]
    assert len(json.loads(det.ok("e", "lt", str(exp_id), "--json", "--limit", "1"))) == 1

    described = det.ok("e", "describe", str(exp_id), "--metrics", "--csv")
    headers = next(r for r in _csv_rows(described) if r and r[:2] == ["Trial ID", "# of Batches"])
    assert "Training Metric: loss" in headers and "Validation Metric: acc" in headers
    out = tmp_path / "out"
    det.ok("e", "describe", str(exp_id), "--outdir", str(out), "--metrics")
    assert sorted(p.name for p in out.iterdir()) == [
        "experiments.csv",
        "trials.csv",
        "workloads.csv",
    ]
    rows = list(csv.DictReader((out / "workloads.csv").open()))
    assert [r["Validation Metric: acc"] for r in rows] == ["0.1", "0.8", "0.6"]

    trial = det.ok("t", "describe", str(trial_id), "--metrics", "--csv")
    assert "Workload Metrics" in trial and '""lr"": 0.1' in trial  # CSV doubles quotes
    one = json.loads(
        det.ok("t", "describe", str(trial_id), "--json", "--limit", "2", "--pages", "1")
    )
    assert len(one["workloads"]) == 2

    if (REF / "bin" / "det").exists():
        ref = Ref(cluster.master, tmp_path / "ref")
        theirs = ref.det("e", "describe", str(exp_id), "--metrics", "--csv")
        their_headers = next(
            r for r in _csv_rows(theirs) if r and r[:2] == ["Trial ID", "# of Batches"]
        )
        assert their_headers == headers  # the same columns in the same order
        ref_out = tmp_path / "ref-out"
        ref_out.mkdir()  # 0.37 needs it to exist; ours creates it
        ref.det("e", "describe", str(exp_id), "--outdir", str(ref_out), "--metrics")
        assert sorted(p.name for p in ref_out.iterdir()) == sorted(p.name for p in out.iterdir())


def test_download_sort_by_config_dev_and_tb_files(
    finished: tuple[Cluster, int, int], tmp_path: pathlib.Path
) -> None:
    cluster, exp_id, trial_id = finished
    det = _det(cluster, tmp_path / "home")
    best_acc = tmp_path / "acc"
    args = ["--best", "--sort-by", "acc", "--smaller-is-better", "false", "-o", str(best_acc)]
    det.ok("t", "download", str(trial_id), *args, "-q")
    assert (best_acc / "step.txt").read_text() == "2"  # acc 0.8
    half = det("t", "download", str(trial_id), "--best", "--sort-by", "acc")
    assert half.returncode == 1 and "must be set together" in half.stderr
    latest = det("t", "download", str(trial_id), "--latest", "--sort-by", "acc",
                 "--smaller-is-better", "true")  # fmt: skip
    assert latest.returncode == 1 and "only be used with --best" in latest.stderr

    config = json.loads(det.ok("master", "config", "--json"))
    assert "port" in config
    assert "cluster_name" in det.ok("master", "config", "--yaml")
    info = det.ok("master", "info", "--yaml")
    assert "clusterId" in info or "version" in info

    token = det.ok("dev", "auth-token").strip()
    assert token and token in det.ok("dev", "curl", "-x", "/api/v1/me")
    if shutil.which("curl"):
        me = json.loads(det.ok("dev", "curl", "/api/v1/me"))
        assert me["user"]["username"] == "admin"
    absolute = det("dev", "curl", "http://elsewhere/api/v1/me")
    assert absolute.returncode == 1 and "not a URL" in absolute.stderr

    said = det.ok("e", "delete-tb-files", str(exp_id))
    assert f"experiment {exp_id}" in said
    assert "usage: det experiment" in det.ok("e", "help")
    assert "usage: det" in det.ok("help")


def test_user_edit_rename_logout_all_and_run_as(
    finished: tuple[Cluster, int, int], tmp_path: pathlib.Path
) -> None:
    cluster, _, _ = finished
    admin = _det(cluster, tmp_path / "home")
    admin.ok("user", "create", "erin", "--password", "Erin-pw-123")
    said = admin.ok("user", "edit", "erin", "--display-name", "Erin E", "--admin", "true")
    assert "Display Name, Admin" in said
    users = {u["username"]: u for u in cluster.get("/api/v1/users")["users"]}
    assert users["erin"]["displayName"] == "Erin E" and users["erin"]["admin"] is True
    nothing = admin("user", "edit", "erin")
    assert nothing.returncode == 1 and "No field provided" in nothing.stderr
    admin.ok("user", "rename", "erin", "erin2")
    assert "erin2" in {u["username"] for u in cluster.get("/api/v1/users")["users"]}

    # -u USER: run one command as another cached user; logout --all forgets them all.
    admin.ok("user", "login", "determined", input="\n")
    assert "'admin'" in admin.ok("-u", "admin", "user", "whoami")
    assert "'determined'" in admin.ok("user", "whoami")
    assert "Logged out 2 user(s)" in admin.ok("user", "logout", "--all")
    store = json.loads((admin.home / "auth.json").read_text())["masters"][cluster.url]
    assert store["tokens"] == {}
