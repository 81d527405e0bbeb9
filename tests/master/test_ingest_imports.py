"""The write worker imports no web code: what it runs (``ingest.write_plain_reports``, sent
pickled by name) and its own module load the store and ``master/ingest`` only, not FastAPI,
Starlette or any router (``determined/master/ingest/__init__.py``)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

from determined.master import ingest

WEB = ("fastapi", "starlette", "determined.master.api", "determined.master._app")

_CHILD = """
import json, pickle, sys
from determined.master.ingest import _write_worker  # the worker process's entry (_serve)
fn = pickle.loads(bytes.fromhex(sys.argv[1]))  # what the master sends it
print(json.dumps({"fn": fn.__module__ + "." + fn.__name__, "modules": sorted(sys.modules)}))
"""


def test_the_write_workers_entry_and_its_writes_import_no_web_code() -> None:
    sent = pickle.dumps(ingest.write_plain_reports).hex()
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, sent], capture_output=True, text=True, check=True
    )
    seen = json.loads(out.stdout)
    assert seen["fn"] == "determined.master.ingest._offload.write_plain_reports"
    loaded = set(seen["modules"])
    assert "determined.master.store" in loaded  # the check sees what the worker imports
    web = sorted(m for m in loaded if m in WEB or m.startswith(tuple(w + "." for w in WEB)))
    assert web == [], f"the write worker imports web code: {web}"
