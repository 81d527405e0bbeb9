"""The SDK calls that issue 13 left for later, against a real master, with 0.37's own SDK
(.refvenv) on the same routes: ``create_experiment(template=)``, ``list_experiments``' filters
applied by the master, ``Checkpoint.remove_files``, ``Checkpoint.get_metrics`` /
``ModelVersion.iter_metrics`` over trial source infos, ``Workspace.list_pools``, and the
enterprise-only OAuth calls. The trials are unmanaged (core_v2 in this process): no training
process is needed to report metrics and checkpoints."""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from _kit.master import MasterProcess, login
from _kit.reference import Ref

from determined import errors
from determined.experimental import client, core_v2

pytestmark = pytest.mark.e2e

CONFIG: dict[str, Any] = {
    "name": "gaps",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": 1},
}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def master(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MasterProcess]:
    """A master without slots (nothing here trains), on each store backend."""
    db_url = None
    if request.param == "postgres":
        db_url = request.getfixturevalue("postgres_server").new_database()
    with MasterProcess(tmp_path_factory.mktemp("gaps") / "data", cpu_slots=0, db_url=db_url) as m:
        yield m


@pytest.fixture(scope="module")
def det(master: MasterProcess) -> client.Determined:
    return client.Determined(master=master.url, user="determined", password="")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    d = tmp_path_factory.mktemp("model")
    (d / "train.py").write_text("print('never run: no slots')\n")
    return d


def _ref(master: MasterProcess, home: pathlib.Path, body: str, *args: str) -> Any:
    """Run ``body`` with 0.37's SDK logged in to ``master``; it prints one JSON line."""
    script = (
        "import json, sys\n"
        "from determined.experimental import client\n"
        "client.login(master=sys.argv[1], user='determined', password='')\n"
        "args = sys.argv[2:]\n" + body
    )
    return Ref(master, home).python(script, *args)


def test_create_experiment_with_a_template(
    master: MasterProcess, det: client.Determined, model_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    admin = master.session()
    template = {"config": {"description": "from the template", "labels": ["tpl"]}}
    r = admin.post(master.url + "/api/v1/templates/gaps-tpl", json=template)
    assert r.status_code == 200, r.text

    exp = det.create_experiment(CONFIG, model_dir, template="gaps-tpl", activate=False)
    exp.reload()
    assert exp.config is not None and exp.config["description"] == "from the template"
    assert exp.config["name"] == "gaps" and exp.labels == {"tpl"}

    with pytest.raises(errors.MasterError, match="template 'nope' not found"):
        det.create_experiment(CONFIG, model_dir, template="nope", activate=False)

    # 0.37's SDK sends the same field.
    config = json.dumps(CONFIG)
    got = _ref(
        master,
        tmp_path / "ref",
        "import pathlib\n"
        "exp = client.create_experiment(json.loads(args[0]), args[1], template='gaps-tpl')\n"
        "print(json.dumps({'id': exp.id}))\n",
        config,
        str(model_dir),
    )
    body = admin.get(f"{master.url}/api/v1/experiments/{got['id']}").json()["experiment"]
    assert body["description"] == "from the template" and body["labels"] == ["tpl"]
    admin.post(f"{master.url}/api/v1/experiments/{got['id']}/kill")


def test_list_experiments_filters_on_the_master(
    master: MasterProcess, det: client.Determined, model_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    made = {}
    for name, labels, desc in [
        ("Alpha-one", ["a", "b"], "first of three"),
        ("alpha-two", ["a"], "second"),
        ("beta", ["b"], "third of three"),
    ]:
        config = {**CONFIG, "name": name, "labels": labels, "description": desc}
        made[name] = det.create_experiment(config, model_dir, activate=False).id
    admin = master.session()

    def ids(**params: Any) -> list[int]:
        r = admin.get(master.url + "/api/v1/experiments", params=params)
        assert r.status_code == 200, r.text
        return [e["id"] for e in r.json()["experiments"] if e["id"] in made.values()]

    # The routes 0.37's clients call: substring names and descriptions ignoring case, every
    # label, states, id bounds, sorting.
    assert ids(name="ALPHA") == [made["Alpha-one"], made["alpha-two"]]
    assert ids(description="of three") == [made["Alpha-one"], made["beta"]]
    assert ids(labels=["a", "b"]) == [made["Alpha-one"]]
    assert ids(labels=["b"]) == [made["Alpha-one"], made["beta"]]
    assert ids(states=["STATE_PAUSED"]) == list(made.values())
    assert ids(states=["STATE_ACTIVE"]) == []
    assert ids(**{"experimentIdFilter.gt": made["Alpha-one"]}) == [
        made["alpha-two"],
        made["beta"],
    ]
    assert ids(**{"experimentIdFilter.notIn": [made["beta"]]}) == [
        made["Alpha-one"],
        made["alpha-two"],
    ]
    assert ids(sortBy="SORT_BY_NAME", orderBy="ORDER_BY_DESC") == [
        made["beta"],
        made["alpha-two"],
        made["Alpha-one"],
    ]
    r = admin.get(master.url + "/api/v1/experiments", params={"sortBy": "SORT_BY_COLOUR"})
    assert r.status_code == 400 and "SORT_BY_NAME" in r.text

    # archived=false over every project hides experiments of archived projects, as in 0.37.
    project = det.create_workspace("gaps-ws").create_project("gaps-proj")
    hidden = det.create_experiment(CONFIG, model_dir, project_id=project.id, activate=False).id
    r = admin.post(f"{master.url}/api/v1/projects/{project.id}/archive")
    assert r.status_code == 200, r.text

    def listed(**params: Any) -> list[int]:
        r = admin.get(master.url + "/api/v1/experiments", params=params)
        return [e["id"] for e in r.json()["experiments"]]

    assert hidden not in listed(archived="false") and hidden in listed()
    assert listed(archived="false", projectId=project.id) == [hidden]

    # Our SDK sends them and takes the master's answer.
    got = det.list_experiments(
        labels=["a"],
        name="alpha",
        states=[client.ExperimentState.PAUSED],
        sort_by=client.ExperimentSortBy.NAME,
        order_by=client.OrderBy.DESC,
    )
    assert [e.id for e in got] == [made["alpha-two"], made["Alpha-one"]]
    got = det.list_experiments(experiment_ids=[made["beta"], made["alpha-two"]])
    assert [e.id for e in got] == [made["alpha-two"], made["beta"]]

    # So does 0.37's.
    ref = _ref(
        master,
        tmp_path / "ref",
        "exps = client.list_experiments(labels=['b'], name='a', "
        "sort_by=client.ExperimentSortBy.ID, order_by=client.OrderBy.DESC)\n"
        "print(json.dumps([e.id for e in exps]))\n",
    )
    assert ref == [made["beta"], made["Alpha-one"]]


def _unmanaged(det: client.Determined, name: str, storage: pathlib.Path) -> Any:
    return core_v2.init_context(
        config=core_v2.Config(name=name, checkpoint_storage=str(storage)), client=det
    )


def test_checkpoint_metrics_remove_files_and_model_versions(
    master: MasterProcess, det: client.Determined, tmp_path: pathlib.Path
) -> None:
    storage = tmp_path / "ckpts"
    with _unmanaged(det, "trained", storage) as ctx:
        ctx.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
        uuids = []
        for _ in range(2):
            with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
                for f in ("a.txt", "b.txt", "keep.txt"):
                    (path / f).write_text(f)
            uuids.append(uuid)
    model = det.create_model("gaps-model")
    version = model.register_version(uuids[0])

    # An inference run reports which checkpoint, and which version, it used.
    with _unmanaged(det, "inference", storage) as inf:
        ckpt = det.get_checkpoint(uuids[0])
        inf.experimental.report_task_using_checkpoint(ckpt)
        inf.train.report_metrics("inference", steps_completed=1, metrics={"acc": 0.5})
        inf.train.report_metrics("inference", steps_completed=2, metrics={"acc": 0.75})
        inf.train.report_training_metrics(steps_completed=2, metrics={"loss": 0.1})
        assert inf.info is not None
        inference_trial = inf.info.trial.trial_id
        inference_exp = inf.info.trial.experiment_id
    with _unmanaged(det, "inference-by-version", storage) as inf2:
        inf2.experimental.report_task_using_model_version(version)
        inf2.train.report_metrics("inference", steps_completed=1, metrics={"acc": 0.9})
        assert inf2.info is not None
        version_trial = inf2.info.trial.trial_id

    # The version's run used the same checkpoint: the checkpoint's metrics hold both runs'.
    found = list(ckpt.get_metrics("inference"))
    assert [(m.trial_id, m.steps_completed, m.metrics) for m in found] == [
        (inference_trial, 1, {"acc": 0.5}),
        (inference_trial, 2, {"acc": 0.75}),
        (version_trial, 1, {"acc": 0.9}),
    ]
    assert {m.group for m in ckpt.get_metrics()} == {"inference", "training"}
    assert list(det.get_checkpoint(uuids[1]).get_metrics()) == []
    by_version = list(version.iter_metrics("inference"))
    assert [m.metrics for m in by_version] == [{"acc": 0.9}]

    ref = _ref(
        master,
        tmp_path / "ref",
        "ckpt = client.get_checkpoint(args[0])\n"
        "version = client.get_model('gaps-model').get_version(1)\n"
        "c = [m.metrics for m in ckpt.get_metrics('inference')]\n"
        "v = [m.metrics for m in version.iter_metrics('inference')]\n"
        "client.get_checkpoint(args[1]).remove_files(['b.txt'])\n"
        "print(json.dumps({'c': c, 'v': v}))\n",
        uuids[0],
        uuids[1],
    )
    assert ref == {"c": [{"acc": 0.5}, {"acc": 0.75}, {"acc": 0.9}], "v": [{"acc": 0.9}]}

    # remove_files: ours on the first checkpoint, the reference's (above) on the second. A
    # registered checkpoint is not changed.
    with pytest.raises(errors.MasterError, match="registered"):
        ckpt.remove_files(["a*"])
    other = det.get_checkpoint(uuids[1])
    other.remove_files(["a*"])
    other.reload()
    assert other.resources is not None
    assert sorted(other.resources) == ["keep.txt", "metadata.json"]
    left = sorted(p.name for p in (storage / uuids[1]).iterdir() if not p.name.startswith("."))
    assert left == ["keep.txt", "metadata.json"]

    # Bad reports are 4xx that say what to fix; another user may not report for the trial.
    sess = master.session(login(master.url, "determined"))
    bad = {"trialId": inference_trial, "checkpointUuid": "no-such", "trialSourceInfoType": "x"}
    r = sess.post(master.url + "/api/v1/trial-source-info", json={"trialSourceInfo": bad})
    assert r.status_code == 400 and "TRIAL_SOURCE_INFO_TYPE_INFERENCE" in r.text
    bad["trialSourceInfoType"] = "TRIAL_SOURCE_INFO_TYPE_INFERENCE"
    r = sess.post(master.url + "/api/v1/trial-source-info", json={"trialSourceInfo": bad})
    assert r.status_code == 404 and "no-such" in r.text
    bad["checkpointUuid"] = uuids[1]
    r = master.session().post(
        master.url + "/api/v1/trial-source-info", json={"trialSourceInfo": bad}
    )
    assert r.status_code == 403 and "another user" in r.text

    # Deleting the inference experiment drops its links with it.
    det.get_experiment(inference_exp).delete()
    deadline = time.monotonic() + 30
    while len(list(ckpt.get_metrics("inference"))) != 1:
        assert time.monotonic() < deadline, "the deleted trial's reports are still listed"
        time.sleep(0.2)


def test_pools_and_oauth_clients(
    master: MasterProcess, det: client.Determined, tmp_path: pathlib.Path
) -> None:
    ws = det.get_workspace("Uncategorized")
    pools = ws.list_pools()
    assert [p.name for p in pools] == ["default"] and isinstance(pools[0], client.ResourcePool)
    with pytest.raises(client.ResourcePoolBindingError, match="one resource pool"):
        pools[0].add_bindings(["Uncategorized"])
    assert pools[0].list_workspaces() == []
    ref = _ref(
        master,
        tmp_path / "ref",
        "ws = client.get_workspace('Uncategorized')\n"
        "print(json.dumps([p.name for p in ws.list_pools()]))\n",
    )
    assert ref == ["default"]

    with pytest.raises(errors.EnterpriseOnlyError, match="enterprise edition"):
        det.list_oauth_clients()
    with pytest.raises(errors.EnterpriseOnlyError, match="enterprise edition"):
        client.add_oauth_client("example.com", "scim")
    with pytest.raises(errors.EnterpriseOnlyError, match="enterprise edition"):
        client.remove_oauth_client("1")
