"""Helpers of the web UI tests: a Core API trial, experiment configs, a session on a real master."""

from __future__ import annotations

import base64
import json
import pathlib
import time
from collections.abc import Callable
from typing import Any

import yaml

from _kit.master import MasterProcess, login

TESTS = pathlib.Path(__file__).resolve().parents[1]

# A Core API trial: training metrics every batch, validation every 2 batches, a checkpoint and
# a rank-tagged log line at the end of each searcher op; resumes from its latest checkpoint.
TRAIN_PY = r"""
import json, time
import determined as det
from determined import core

info = det.get_cluster_info()
hp = info.trial.hparams
with core.init() as ctx:
    steps = 0
    if info.latest_checkpoint:
        with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
            steps = json.loads((path / "state.json").read_text())["steps"]
    print(f"hello from trial {info.trial.trial_id}", flush=True)
    for op in ctx.searcher.operations():
        while steps < op.length:
            time.sleep(hp.get("sleep", 0))
            steps += 1
            ctx.train.report_training_metrics(
                steps, {"loss": hp["lr"] * 10 / steps, "accuracy": steps / 100}
            )
            if steps % 2 == 0 or steps == op.length:
                ctx.train.report_validation_metrics(steps, {"loss": hp["lr"] / steps})
            if ctx.preempt.should_preempt():
                break
        with ctx.checkpoint.store_path({"steps_completed": steps}) as (path, _):
            (path / "state.json").write_text(json.dumps({"steps": steps}))
        print(f"[rank=0] trained to {steps}", flush=True)
        if steps < op.length:
            break
        op.report_completed(hp["lr"] / steps)
"""


def expected_training(lr: float, upto: int) -> list[list[float]]:
    return [[s, lr * 10 / s] for s in range(1, upto + 1)]


def expected_validation(lr: float, upto: int) -> list[list[float]]:
    return [[s, lr / s] for s in range(2, upto + 1, 2)]


WAIT_S = 20


def wait_for(browser: Any, check: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    """``check()``'s first truthy value (exceptions count as not yet), or fail naming ``what``."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def probe(_: Any) -> Any:
        try:
            return check()
        except Exception:
            return False

    try:
        return WebDriverWait(browser, timeout, poll_frequency=0.1).until(probe)
    except Exception as e:
        errors = browser.find_elements(By.ID, "error")
        shown = errors[0].text if errors else ""
        raise AssertionError(f"timed out waiting for {what}; page error: {shown!r}") from e


def chart_series(browser: Any, chart_id: str) -> dict[str, list[list[float]]]:
    """What the chart ``chart_id`` draws: ``{label: [[x, y], ...]}`` (its data-series)."""
    from selenium.webdriver.common.by import By

    raw = browser.find_element(By.ID, chart_id).get_attribute("data-series")
    return dict(json.loads(raw)) if raw else {}


class Cluster:
    """A session of user ``determined`` (whom the web UI logs in as by itself, so it owns
    what this creates) on a real master, with bounded waits."""

    def __init__(self, master: MasterProcess) -> None:
        self.master = master
        self.url: str = master.url
        self.s = master.session(login(master.url, "determined"))
        self.done = 0  # the finished experiment of the ``cluster`` fixture
        self.killed = 0  # one the list test kills
        self.asha = 0  # a finished ASHA experiment (finished_asha)

    def create(self, cfg: dict[str, Any], session: Any = None) -> int:
        """Create (as ``session``'s user; default ``determined``) and activate."""
        content = base64.b64encode(TRAIN_PY.encode()).decode()
        body = {
            "config": yaml.safe_dump(cfg),
            "modelDefinition": [{"path": "train.py", "type": "0", "content": content}],
            "activate": True,
        }
        r = (session or self.s).post(self.url + "/api/v1/experiments", json=body)
        assert r.status_code == 200, r.text
        return int(r.json()["experiment"]["id"])

    def finished_asha(self) -> int:
        """A finished ASHA experiment (made once per cluster)."""
        if not self.asha:
            self.asha = self.create(asha_config())
            self.wait_state(self.asha, "STATE_COMPLETED", timeout=120)
        return self.asha

    def get(self, path: str) -> Any:
        r = self.s.get(self.url + path)
        assert r.status_code == 200, r.text
        return r.json()

    def experiment(self, exp_id: int) -> dict[str, Any]:
        return dict(self.get(f"/api/v1/experiments/{exp_id}")["experiment"])

    def trials(self, exp_id: int) -> list[dict[str, Any]]:
        return list(self.get(f"/api/v1/experiments/{exp_id}/trials")["trials"])

    def wait_state(self, exp_id: int, *states: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            exp = self.experiment(exp_id)
            if exp["state"] in states:
                return exp
            if time.monotonic() > deadline:
                raise AssertionError(f"experiment {exp_id} is {exp['state']}, not {states}")
            time.sleep(0.2)


def random_config(name: str, *, max_trials: int, max_length: int, **hp: Any) -> dict[str, Any]:
    return {
        "name": name,
        "entrypoint": "python3 train.py",
        "max_restarts": 0,
        "searcher": {
            "name": "random",
            "metric": "loss",
            "max_trials": max_trials,
            "max_length": max_length,
        },
        "hyperparameters": {"lr": {"type": "double", "minval": 0.1, "maxval": 1.0}, **hp},
    }


def asha_config() -> dict[str, Any]:
    return {
        "name": "webui-asha",
        "entrypoint": "python3 train.py",
        "max_restarts": 0,
        "searcher": {
            "name": "async_halving",
            "metric": "loss",
            "max_trials": 4,
            "max_length": 4,
            "num_rungs": 2,
            "divisor": 2,
        },
        "hyperparameters": {"lr": {"type": "double", "minval": 0.1, "maxval": 1.0}},
    }


# The six hyperparameters of examples/mnist_pytorch/adaptive.yaml: a realistic width for the
# trials table.
MNIST_HPARAMS: dict[str, Any] = {
    "global_batch_size": 64,
    "lr": {"type": "log", "base": 10, "minval": -2.5, "maxval": -0.5},
    "momentum": {"type": "double", "minval": 0.5, "maxval": 0.95},
    "n_filters1": {"type": "int", "minval": 4, "maxval": 16},
    "n_filters2": {"type": "int", "minval": 8, "maxval": 32},
    "dropout": {"type": "double", "minval": 0.0, "maxval": 0.4},
}
WIDE_STEPS = range(50, 401, 50)


def wide_search(name: str, trials: int) -> dict[str, Any]:
    """A random search of ``trials`` trials (all created at once) over MNIST_HPARAMS."""
    return {
        "name": name,
        "description": "a random search over the mnist example's six hyperparameters",
        "entrypoint": "python3 train.py",
        "searcher": {
            "name": "random",
            "metric": "validation_loss",
            "max_trials": trials,
            "max_concurrent_trials": trials,
            "max_length": {"batches": WIDE_STEPS[-1]},
        },
        "hyperparameters": MNIST_HPARAMS,
    }


def wide_loss(lr: float, steps: int) -> float:
    return lr * 100 / steps


def report_by_hand(master: MasterProcess, cfg: dict[str, Any]) -> int:
    """Create ``cfg``'s experiment on a master without a resource manager and, for each of its
    trials, start a run over the dev endpoints and report training and validation metrics at
    WIDE_STEPS (validation_loss = wide_loss(lr, steps)): the UI's view of a big search in
    seconds, without a trial process per trial. The trials stay RUNNING."""
    admin = master.session()
    r = admin.post(master.url + "/api/v1/experiments", json={"config": yaml.safe_dump(cfg)})
    assert r.status_code == 200, r.text
    exp_id = int(r.json()["experiment"]["id"])
    trials = admin.get(master.url + f"/api/v1/experiments/{exp_id}/trials").json()["trials"]
    for t in trials:
        r = admin.post(master.url + f"/api/v1/dev/trials/{t['id']}/allocate", json={})
        assert r.status_code == 200, r.text
        run = r.json()
        s = master.session(run["token"], allocation=True)
        lr = t["hparams"]["lr"]
        for steps in WIDE_STEPS:
            for group, values in (
                ("training", {"loss": wide_loss(lr, steps) * 2}),
                ("validation", {"validation_loss": wide_loss(lr, steps), "accuracy": 0.9}),
            ):
                body = {
                    "group": group,
                    "metrics": {
                        "trialId": t["id"],
                        "trialRunId": run["runId"],
                        "stepsCompleted": steps,
                        "metrics": {"avgMetrics": values},
                    },
                }
                r = s.post(master.url + f"/api/v1/trials/{t['id']}/metrics", json=body)
                assert r.status_code == 200, r.text
    return exp_id
