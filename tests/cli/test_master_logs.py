"""``det master logs`` and ``GET /api/v1/master/logs``: the master's own log lines, with our
CLI and Determined 0.37's."""

from __future__ import annotations

import json
import pathlib

import pytest
import requests
from _kit.cli import Det
from _kit.master import MasterProcess, login
from _kit.reference import Ref

pytestmark = pytest.mark.e2e


def test_master_logs(tmp_path: pathlib.Path) -> None:
    with MasterProcess(tmp_path / "data", args=["--log-level", "info"]) as master:
        det = Det(tmp_path / "home", master.url)
        r = det("master", "logs")
        assert r.returncode == 1 and "only admins may read the master's logs (HTTP 403)" in r.stderr
        det.ok("user", "login", "admin", input="\n")
        out = det.ok("master", "logs")
        assert "[LOG_LEVEL_INFO]: determined.master: master " in out
        assert f"serving on 127.0.0.1:{master.port}" in out
        assert len(det.ok("master", "logs", "--tail", "1").splitlines()) == 1

        # follow: the last line, then the stream stays open for new ones (without follow
        # it ends after the last line).
        token = login(master.url, "admin")
        headers = {"Authorization": f"Bearer {token}"}
        url = master.url + "/api/v1/master/logs"
        plain = requests.get(url, params={"offset": -1}, headers=headers, timeout=10)
        (only,) = [json.loads(x)["result"]["logEntry"] for x in plain.text.splitlines()]
        assert set(only) == {"id", "timestamp", "message", "level"}
        params = {"follow": "true", "offset": -1}
        with requests.get(url, params=params, headers=headers, stream=True, timeout=(5, 2)) as r:
            lines = r.iter_lines()
            assert json.loads(next(lines))["result"]["logEntry"] == only
            with pytest.raises(requests.exceptions.ConnectionError):
                next(lines)  # no more lines yet, and the stream is still open

        ref = Ref(master, tmp_path / "ref")
        ref.env["DET_USER"] = "admin"
        assert f"serving on 127.0.0.1:{master.port}" in ref.det("master", "logs")
