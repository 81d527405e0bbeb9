# Ported from Determined 0.37.0, harness/tests/launch/test_util.py
# (https://github.com/determined-ai/determined, Apache License 2.0; see NOTICE): the helpers the
# launcher tests use, on this tree's ClusterInfo.
"""Scaffolding of 0.37's launcher tests: a cluster info, environment variables, parse checks."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable, Iterator

from reference_harness import _utils as utils

import determined as det


def make_mock_cluster_info(
    container_addrs: list[str],
    container_rank: int,
    num_slots: int,
    latest_checkpoint: str | None = None,
) -> det.ClusterInfo:
    config = utils.make_default_exp_config({}, 100, "loss", None)
    trial_info = det.TrialInfo(
        trial_id=1,
        experiment_id=1,
        trial_seed=0,
        hparams={},
        config=config,
        steps_completed=0,
        trial_run_id=0,
        debug=False,
        inter_node_network_interface=None,
    )
    rendezvous_info = det.RendezvousInfo(
        container_addrs=container_addrs,
        container_rank=container_rank,
        container_slot_counts=[num_slots // len(container_addrs) for _ in container_addrs],
    )
    return det.ClusterInfo(
        master_url="localhost",
        cluster_id="clusterId",
        agent_id="agentId",
        slot_ids=list(range(num_slots)),
        task_id="taskId",
        allocation_id="allocationId",
        session_token="sessionToken",
        task_type="TRIAL",
        rendezvous_info=rendezvous_info,
        trial_info=trial_info,
        latest_checkpoint=latest_checkpoint,
    )


@contextlib.contextmanager
def set_env_vars(env_vars: dict[str, str]) -> Iterator[None]:
    try:
        for k, v in env_vars.items():
            os.environ[k] = v
        yield
    finally:
        for k in env_vars:
            del os.environ[k]


def parse_args_check(
    positive_cases: dict[str, list[str]],
    negative_cases: dict[str, str],
    parse_func: Callable[[list[str]], list[str]],
) -> None:
    for args, expected in positive_cases.items():
        assert expected == parse_func(args.split()), f"test case failed, args = {args}"
    for args, msg in negative_cases.items():
        old, fake = sys.stderr, io.StringIO()
        sys.stderr = fake
        try:
            try:
                parse_func(args.split())
            except SystemExit:
                err = fake.getvalue()
                assert msg in err, f"test case failed, args='{args}' msg='{msg}', stderr='{err}'"
                continue
            raise AssertionError(f"negative test case did not fail: args='{args}'")
        finally:
            sys.stderr = old
