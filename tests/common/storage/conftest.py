"""An S3 server (moto's, in a thread on 127.0.0.1) and Azurite (the Azure Storage emulator, a
subprocess), with a fresh bucket or container per test."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

S3_KEYS = {"access_key": "testing", "secret_key": "testing"}


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_config(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A ``checkpoint_storage`` section for a new, empty bucket on the moto server."""
    import boto3

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    bucket = "ckpt-" + uuid.uuid4().hex[:12]
    client = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    client.create_bucket(Bucket=bucket)
    return {
        "type": "s3",
        "bucket": bucket,
        "endpoint_url": moto_endpoint,
        "prefix": "runs/exp1",
        **S3_KEYS,
    }


@pytest.fixture
def s3_client(s3_config: dict[str, Any]) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=s3_config["endpoint_url"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


# Azurite, the Azure Storage emulator (npm package ``azurite``; scripts/setup.sh --tests puts it
# in .tools/), serving blobs for the azure backend's tests.
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
REPO = pathlib.Path(__file__).resolve().parents[3]


def _azurite_blob() -> str:
    """The azurite-blob command, or pytest.skip saying how to get it."""
    try:
        import azure.storage.blob  # noqa: F401
    except ImportError:
        pytest.skip("azure-storage-blob is not installed: pip install 'redetermined[azure]'")
    found = (
        os.environ.get("AZURITE_BLOB")
        or shutil.which("azurite-blob", path=str(REPO / ".tools" / "node_modules" / ".bin"))
        or shutil.which("azurite-blob")
    )
    if not found:
        pytest.skip(
            "Azurite is not installed: run scripts/setup.sh --tests, or npm install --prefix "
            ".tools azurite (or set AZURITE_BLOB to its azurite-blob)"
        )
    return found


@pytest.fixture(scope="session")
def azurite_connection_string(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A connection string for a fresh Azurite blob service on 127.0.0.1."""
    command = _azurite_blob()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tmp_path_factory.mktemp("azurite")
    proc = subprocess.Popen(
        [command, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(data)]
        + ["--silent", "--skipApiVersionCheck", "--loose"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    pytest.fail(f"Azurite did not start on port {port}: {err}")
                time.sleep(0.1)
        yield (
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
            f"AccountKey={AZURITE_KEY};BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
        )
    finally:
        proc.send_signal(signal.SIGINT)  # Azurite shuts down on SIGINT; SIGTERM it ignores
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def azure_config(azurite_connection_string: str) -> dict[str, Any]:
    """A ``checkpoint_storage`` section for a new container (with a prefix) on Azurite."""
    return {
        "type": "azure",
        "container": "ckpt-" + uuid.uuid4().hex[:12] + "/runs/exp1",
        "connection_string": azurite_connection_string,
    }
