"""Where a task learns about the cluster it runs on.

Determined writes ``/run/determined/info/{cluster,trial,rendezvous,resources}.json`` inside each
container. A trial started by our own master gets no such files: it gets the ``DET_*`` environment
variables of ``docs/reference/master.md`` §3.1, and we read those instead. With neither, the process
runs locally and :func:`get_cluster_info` returns None.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from determined.common.expconf import ExperimentConfig

INFO_DIR = "/run/determined/info"

_REQUIRED_CLUSTER_ENV = (
    "DET_MASTER",
    "DET_CLUSTER_ID",
    "DET_AGENT_ID",
    "DET_SLOT_IDS",
    "DET_TASK_ID",
    "DET_ALLOCATION_ID",
    "DET_SESSION_TOKEN",
    "DET_TASK_TYPE",
)
_REQUIRED_TRIAL_ENV = (
    "DET_TRIAL_ID",
    "DET_EXPERIMENT_ID",
    "DET_TRIAL_SEED",
    "DET_HPARAMS",
    "DET_EXPERIMENT_CONFIG",
    "DET_STEPS_COMPLETED",
    "DET_TRIAL_RUN_ID",
)


def _public_vars(obj: Any, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON form of an info object: attribute names without their leading underscore."""
    return {k.lstrip("_"): v for k, v in vars(obj).items() if k not in skip}


def _info_path(info_dir: str | None, name: str) -> str:
    # INFO_DIR is read at call time so a test can point it at a temporary directory.
    return os.path.join(INFO_DIR if info_dir is None else info_dir, name)


def _read_json(path: str) -> dict[str, Any] | None:
    if not os.path.exists(path):
        return None
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise RuntimeError(f"{path} must hold a JSON object, not {type(data).__name__}")
    return data


def _missing_env(names: tuple[str, ...]) -> list[str]:
    return [n for n in names if n not in os.environ]


class RendezvousInfo:
    """The addresses, rank and slot counts of every container of this allocation."""

    def __init__(
        self, container_addrs: list[str], container_rank: int, container_slot_counts: list[int]
    ) -> None:
        self.container_addrs = container_addrs
        self.container_rank = container_rank
        self.container_slot_counts = container_slot_counts

    @classmethod
    def _from_file(cls, info_dir: str | None = None) -> RendezvousInfo | None:
        data = _read_json(_info_path(info_dir, "rendezvous.json"))
        return None if data is None else cls(**data)

    @classmethod
    def _from_env(cls, n_slots: int) -> RendezvousInfo:
        """``DET_CONTAINER_ADDRS`` / ``_RANK`` / ``_SLOT_COUNTS`` (our master's multi-container
        launch); a single local container when they are unset."""
        return cls(
            container_addrs=json.loads(os.environ.get("DET_CONTAINER_ADDRS", '["127.0.0.1"]')),
            container_rank=int(os.environ.get("DET_CONTAINER_RANK", "0")),
            container_slot_counts=json.loads(
                os.environ.get("DET_CONTAINER_SLOT_COUNTS", json.dumps([n_slots]))
            ),
        )

    def _to_file(self, info_dir: str | None = None) -> None:
        with open(_info_path(info_dir, "rendezvous.json"), "w") as f:
            json.dump(_public_vars(self), f)


class TrialInfo:
    """The trial this process belongs to: ids, seed, hyperparameters and the defaulted config."""

    def __init__(
        self,
        trial_id: int,
        experiment_id: int,
        trial_seed: int,
        hparams: dict[str, Any],
        config: dict[str, Any],
        steps_completed: int,
        trial_run_id: int,
        debug: bool = False,
        unique_port_offset: int = 0,
        inter_node_network_interface: str | None = None,
        tensorboard_logging: bool = True,
    ) -> None:
        self.trial_id = trial_id
        self.experiment_id = experiment_id
        self.trial_seed = trial_seed
        self.hparams = hparams
        # Private, as in the reference: the config's shape is not a stable API for user code.
        self._config = config
        self._parsed: ExperimentConfig | None = None
        self._steps_completed = steps_completed
        self._trial_run_id = trial_run_id
        self._debug = debug
        self._unique_port_offset = unique_port_offset
        self._inter_node_network_interface = inter_node_network_interface
        self._tensorboard_logging = tensorboard_logging

    @classmethod
    def _from_env(cls) -> TrialInfo:
        missing = _missing_env(_REQUIRED_TRIAL_ENV)
        if missing:
            raise RuntimeError(
                f"missing environment variables {', '.join(missing)}: a trial process needs every "
                "one of them (is this really running as a trial?)"
            )
        config = json.loads(os.environ["DET_EXPERIMENT_CONFIG"])
        return cls(
            trial_id=int(os.environ["DET_TRIAL_ID"]),
            experiment_id=int(os.environ["DET_EXPERIMENT_ID"]),
            trial_seed=int(os.environ["DET_TRIAL_SEED"]),
            hparams=json.loads(os.environ["DET_HPARAMS"]),
            config=config,
            steps_completed=int(os.environ["DET_STEPS_COMPLETED"]),
            trial_run_id=int(os.environ["DET_TRIAL_RUN_ID"]),
            debug=bool(config.get("debug", False)),
            unique_port_offset=int(os.environ.get("DET_UNIQUE_PORT_OFFSET", "0")),
            inter_node_network_interface=os.environ.get("DET_INTER_NODE_NETWORK_INTERFACE"),
            tensorboard_logging=bool(config.get("tensorboard_logging", True)),
        )

    @classmethod
    def _from_file(cls, info_dir: str | None = None) -> TrialInfo | None:
        data = _read_json(_info_path(info_dir, "trial.json"))
        return None if data is None else cls(**data)

    def _to_file(self, info_dir: str | None = None) -> None:
        with open(_info_path(info_dir, "trial.json"), "w") as f:
            json.dump(_public_vars(self, ("_parsed",)), f)

    def _experiment_config(self) -> ExperimentConfig:
        """The config, parsed (on first use) with the model the master resolved it with
        (``determined.common.expconf``): what the harness reads, every default filled in.

        Raises:
            determined.errors.InvalidExperimentConfig: a config no master would send.
        """
        if self._parsed is None:
            from determined.common import expconf  # pydantic: only trials that read it pay

            self._parsed = expconf.parse_experiment_config(self._config)
        return self._parsed


class ResourcesInfo:
    """The GPUs given to this container."""

    def __init__(self, gpu_uuids: list[str]) -> None:
        self._gpu_uuids = gpu_uuids

    @property
    def gpu_uuids(self) -> list[str]:
        return self._gpu_uuids

    @classmethod
    def _from_file(cls, info_dir: str | None = None) -> ResourcesInfo | None:
        data = _read_json(_info_path(info_dir, "resources.json"))
        return None if data is None else cls(**data)

    @classmethod
    def _from_env(cls) -> ResourcesInfo:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return cls(gpu_uuids=[g for g in visible.split(",") if g])

    def _to_file(self, info_dir: str | None = None) -> None:
        with open(_info_path(info_dir, "resources.json"), "w") as f:
            json.dump(_public_vars(self), f)


class ClusterInfo:
    """What a task running under a master knows about its cluster.

    Obtain it with :func:`determined.get_cluster_info`, which returns None off-cluster. Code that
    depends on it for more than logging will not run locally.
    """

    def __init__(
        self,
        master_url: str,
        cluster_id: str,
        agent_id: str,
        slot_ids: list[int],
        task_id: str,
        allocation_id: str,
        session_token: str,
        task_type: str,
        master_cert_name: str | None = None,
        master_cert_file: str | None = None,
        latest_checkpoint: str | None = None,
        trial_info: TrialInfo | None = None,
        rendezvous_info: RendezvousInfo | None = None,
        resources_info: ResourcesInfo | None = None,
    ) -> None:
        self.master_url = master_url
        self.cluster_id = cluster_id
        self.agent_id = agent_id
        self.slot_ids = slot_ids
        self.task_id = task_id
        self.allocation_id = allocation_id
        self.session_token = session_token
        self.task_type = task_type
        self.master_cert_name = master_cert_name
        self.master_cert_file = master_cert_file
        self._latest_checkpoint = latest_checkpoint
        self._trial_info = trial_info
        self._rendezvous_info = rendezvous_info
        self._resources_info = resources_info

    @classmethod
    def _from_env(cls) -> ClusterInfo:
        """Build from the ``DET_*`` variables our master sets; RuntimeError if any is missing."""
        missing = _missing_env(_REQUIRED_CLUSTER_ENV)
        if missing:
            raise RuntimeError(
                f"missing environment variables {', '.join(missing)}: is this running on-cluster?"
            )
        slot_ids = json.loads(os.environ["DET_SLOT_IDS"])
        is_trial = os.environ["DET_TASK_TYPE"] == "TRIAL"
        return cls(
            master_url=os.environ["DET_MASTER"],
            cluster_id=os.environ["DET_CLUSTER_ID"],
            agent_id=os.environ["DET_AGENT_ID"],
            slot_ids=slot_ids,
            task_id=os.environ["DET_TASK_ID"],
            allocation_id=os.environ["DET_ALLOCATION_ID"],
            session_token=os.environ["DET_SESSION_TOKEN"],
            task_type=os.environ["DET_TASK_TYPE"],
            master_cert_name=os.environ.get("DET_MASTER_CERT_NAME"),
            master_cert_file=os.environ.get("DET_MASTER_CERT_FILE"),
            latest_checkpoint=os.environ.get("DET_LATEST_CHECKPOINT") or None,
            trial_info=TrialInfo._from_file() or (TrialInfo._from_env() if is_trial else None),
            rendezvous_info=RendezvousInfo._from_file() or RendezvousInfo._from_env(len(slot_ids)),
            resources_info=ResourcesInfo._from_file() or ResourcesInfo._from_env(),
        )

    @classmethod
    def _from_file(cls, info_dir: str | None = None) -> ClusterInfo | None:
        data = _read_json(_info_path(info_dir, "cluster.json"))
        if data is None:
            return None
        return cls(
            trial_info=TrialInfo._from_file(info_dir),
            rendezvous_info=RendezvousInfo._from_file(info_dir),
            resources_info=ResourcesInfo._from_file(info_dir),
            **data,
        )

    def _to_file(self, info_dir: str | None = None) -> None:
        skip = ("_trial_info", "_rendezvous_info", "_resources_info")
        with open(_info_path(info_dir, "cluster.json"), "w") as f:
            json.dump(_public_vars(self, skip), f)

    @property
    def latest_checkpoint(self) -> str | None:
        """The storage id of the checkpoint to resume from; always None for non-trial tasks."""
        return self._latest_checkpoint if self.task_type == "TRIAL" else None

    @property
    def user_data(self) -> dict[str, Any]:
        """The experiment config's ``data`` field; ``{}`` for non-trial tasks."""
        if self.task_type != "TRIAL":
            return {}
        data = self.trial._config.get("data", {})
        return data if isinstance(data, dict) else {}

    @property
    def trial(self) -> TrialInfo:
        """The trial's info; RuntimeError when this task is not a trial."""
        if self.task_type != "TRIAL" or self._trial_info is None:
            raise RuntimeError(
                f'.trial is only available when .task_type is "TRIAL", not "{self.task_type}"'
            )
        return self._trial_info

    def _rendezvous(self) -> RendezvousInfo:
        if self._rendezvous_info is None:
            return RendezvousInfo(["127.0.0.1"], 0, [len(self.slot_ids)])
        return self._rendezvous_info

    @property
    def container_addrs(self) -> list[str]:
        """Addresses of every container of the allocation, chief first."""
        if self.task_type != "TRIAL":
            return ["127.0.0.1"]
        return self._rendezvous().container_addrs

    @property
    def container_rank(self) -> int:
        """This container's rank within the allocation."""
        if self.task_type != "TRIAL":
            return 0
        return self._rendezvous().container_rank

    @property
    def container_slot_counts(self) -> list[int]:
        """Slots of every container of the allocation, in rank order."""
        if self.task_type != "TRIAL":
            return [len(self.slot_ids)]
        return self._rendezvous().container_slot_counts

    @property
    def gpu_uuids(self) -> list[str]:
        """The GPUs given to this container."""
        return [] if self._resources_info is None else self._resources_info.gpu_uuids


_UNLOADED = object()
_cached: Any = _UNLOADED


def get_cluster_info() -> ClusterInfo | None:
    """This task's :class:`ClusterInfo`, or None when running locally.

    Reads ``/run/determined/info/cluster.json`` (Determined's containers) or else the ``DET_*``
    environment that our master sets (``DET_TASK_TYPE`` marks it). The first answer, None included,
    is cached for the life of the process.
    """
    global _cached
    if _cached is _UNLOADED:
        info = ClusterInfo._from_file()
        if info is None and "DET_TASK_TYPE" in os.environ:
            info = ClusterInfo._from_env()
        _cached = info
    return _cached


def _reset_cluster_info_cache() -> None:
    """Forget the cached answer (tests, and processes that change their environment)."""
    global _cached
    _cached = _UNLOADED
