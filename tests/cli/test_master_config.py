"""``det master config [show|set]`` and ``GET/PATCH /api/v1/master/config``, with our CLI and
Determined 0.37's against our master."""

from __future__ import annotations

import argparse
import json
import pathlib

import pytest
import yaml
from _kit.cli import Det
from _kit.master import MasterProcess
from _kit.reference import Ref

from determined.master.__main__ import parse_args, shown_config


def test_shown_config_redacts_the_database_password(tmp_path: pathlib.Path) -> None:
    args = parse_args(["--db-url", "postgresql://det:s3cret@db:5432/det", "--cpu-slots", "2"])
    shown = shown_config(args, tmp_path)
    text = json.dumps(shown)
    assert "s3cret" not in text
    assert shown["db"]["url"] == "postgresql://det:***@db:5432/det"
    assert shown["resource_manager"] == {"type": "local", "cpu_slots": 2, "slots_per_agent": None}
    assert shown["root"] == str(tmp_path)
    assert isinstance(args, argparse.Namespace)


@pytest.mark.e2e
def test_master_config_show_and_set(master: MasterProcess, tmp_path: pathlib.Path) -> None:
    det = Det(tmp_path / "home", master.url)
    # Admins only, as in 0.37; the default user 'determined' is not one.
    r = det("master", "config")
    assert r.returncode == 1
    assert "only admins may view the master config (HTTP 403)" in r.stderr

    det.ok("user", "login", "admin", input="\n")
    shown = yaml.safe_load(det.ok("master", "config"))
    assert shown["root"] == str(master.data_dir.resolve())
    assert shown["resource_manager"]["type"] == "none"
    assert shown["db"]["url"].startswith("sqlite")
    assert json.loads(det.ok("master", "config", "show", "--json")) == shown

    r = det("master", "config", "set", "--log.level", "debug")
    assert r.returncode == 1
    assert "not supported yet" in r.stderr and "HTTP 501" in r.stderr
    r = det("master", "config", "set")
    assert r.returncode == 1 and "--log.level" in r.stderr

    # 0.37's own CLI reads the same wire.
    ref = Ref(master, tmp_path / "ref")
    ref.env["DET_USER"] = "admin"
    # (Its output also carries its warning about the admin's empty password.)
    assert f"root: {shown['root']}" in ref.det("master", "config")
    out = ref.det("master", "config", "show", "--json")
    assert json.loads(out[out.index("{") : out.rindex("}") + 1]) == shown
