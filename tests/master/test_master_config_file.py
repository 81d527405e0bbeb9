"""``python -m determined.master --config-file F``: options from YAML, the command line wins."""

from __future__ import annotations

import pathlib

import pytest
import requests
from _kit.master import MasterProcess, free_port

from determined.master import __main__ as master_main


def _write(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    path = tmp_path / "master.yaml"
    path.write_text(text)
    return path


def test_file_values_and_command_line_precedence(tmp_path: pathlib.Path) -> None:
    cfg = _write(tmp_path, "port: 9123\ncpu_slots: 3\ndb_url: sqlite:////tmp/x.db\n")
    args = master_main.parse_args(["--config-file", str(cfg)])
    assert (args.port, args.cpu_slots, args.db_url) == (9123, 3, "sqlite:////tmp/x.db")
    args = master_main.parse_args(["--config-file", str(cfg), "--port", "9200"])
    assert (args.port, args.cpu_slots) == (9200, 3)
    assert master_main.parse_args([]).port == 8080
    policy = "retention_policy:\n  log_retention_days: 30\n  schedule: 12h\n"
    args = master_main.parse_args(["--config-file", str(_write(tmp_path, policy))])
    assert (args.log_retention_days, args.log_retention_schedule) == (30, "12h")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("port: 1\nbogus: 2\n", "unknown keys bogus"),
        ("port: eighty\n", "port must be an integer"),
        ("- a list\n", "must be a YAML mapping"),
        ("port: [\n", "cannot read master config"),
        ("retention_policy: {log_retention_days: -5}\n", "from -1 (forever) to 32767"),
        ("retention_policy: {days: 3}\n", "retention_policy takes log_retention_days"),
    ],
)
def test_bad_files_are_refused_with_what_to_fix(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        master_main.parse_args(["--config-file", str(_write(tmp_path, text))])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.e2e
def test_a_master_started_from_a_config_file(tmp_path: pathlib.Path) -> None:
    port, db = free_port(), tmp_path / "elsewhere" / "master.db"
    db.parent.mkdir()
    cfg = _write(
        tmp_path, f"port: {port}\ndb_url: sqlite:///{db}\ncluster_name: from-file\ncpu_slots: 1\n"
    )
    # The helper finds the port in the file and passes neither --port nor a resource manager.
    with MasterProcess(tmp_path / "home", config_file=cfg, dev_endpoints=False) as master:
        assert master.url == f"http://127.0.0.1:{port}"
        info = requests.get(master.url + "/info", timeout=5).json()
        assert info["cluster_name"] == "from-file"
        assert db.exists()
