"""``type: s3``: checkpoints in an S3 (or S3-compatible) bucket, through boto3 (extra ``[s3]``)."""

from __future__ import annotations

from typing import Any

from determined.common.storage._cloud import CloudStorageManager

_DELETE_BATCH = 1000  # the most keys one DeleteObjects request takes


def _boto3() -> Any:
    try:
        import boto3
    except ImportError as e:
        raise ImportError(
            "checkpoint_storage type s3 needs boto3, which is not installed; install the extra "
            "with: pip install 'redetermined[s3]'"
        ) from e
    return boto3


class _S3Store:
    def __init__(
        self,
        bucket: str,
        access_key: str | None,
        secret_key: str | None,
        endpoint_url: str | None,
    ) -> None:
        self.bucket = bucket
        self.location = f"s3://{bucket}"
        self._client = _boto3().client(
            "s3",
            endpoint_url=endpoint_url,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
        )

    def put_file(self, key: str, path: str) -> None:
        self._client.upload_file(path, self.bucket, key)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def get_file(self, key: str, path: str) -> None:
        self._client.download_file(self.bucket, key, path)

    def get_bytes(self, key: str) -> bytes | None:
        try:
            resp = self._client.get_object(Bucket=self.bucket, Key=key)
        except self._client.exceptions.NoSuchKey:
            return None
        data: bytes = resp["Body"].read()
        return data

    def list_prefix(self, prefix: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for page in self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        ):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = int(obj["Size"])
        return out

    def delete(self, keys: list[str]) -> None:
        for i in range(0, len(keys), _DELETE_BATCH):
            batch = [{"Key": k} for k in keys[i : i + _DELETE_BATCH]]
            resp = self._client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
            )
            if resp.get("Errors"):
                first = resp["Errors"][0]
                raise OSError(
                    f"could not delete s3://{self.bucket}/{first.get('Key')}: "
                    f"{first.get('Code')} {first.get('Message')}"
                )


class S3StorageManager(CloudStorageManager):
    """Checkpoints under ``s3://<bucket>/<prefix>/<storage_id>/``. Credentials come from
    ``access_key``/``secret_key`` when given, else from boto3's usual sources (environment,
    ``~/.aws``, instance role). ``endpoint_url`` points at an S3-compatible service (MinIO...).
    Raises ImportError naming the ``[s3]`` extra when boto3 is missing."""

    def __init__(
        self,
        bucket: str,
        access_key: str | None = None,
        secret_key: str | None = None,
        endpoint_url: str | None = None,
        prefix: str | None = None,
        temp_dir: str | None = None,
    ) -> None:
        super().__init__(_S3Store(bucket, access_key, secret_key, endpoint_url), prefix, temp_dir)
