"""An S3 server (moto's, in a thread on 127.0.0.1) and a fresh bucket per test."""

from __future__ import annotations

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
