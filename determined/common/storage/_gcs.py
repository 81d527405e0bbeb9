"""``type: gcs``: checkpoints in a Google Cloud Storage bucket, through google-cloud-storage
(extra ``[gcs]``). Credentials come from the library's usual sources
(``GOOGLE_APPLICATION_CREDENTIALS``, the metadata server)."""

from __future__ import annotations

from typing import Any

from determined.common.storage._cloud import CloudStorageManager


def _gcs() -> Any:
    try:
        from google.cloud import storage
    except ImportError as e:
        raise ImportError(
            "checkpoint_storage type gcs needs google-cloud-storage, which is not installed; "
            "install the extra with: pip install 'redetermined[gcs]'"
        ) from e
    return storage


class _GCSStore:
    def __init__(self, bucket: str) -> None:
        self.location = f"gs://{bucket}"
        self._gcs = _gcs()
        self._bucket = self._gcs.Client().bucket(bucket)

    def put_file(self, key: str, path: str) -> None:
        self._bucket.blob(key).upload_from_filename(path)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._bucket.blob(key).upload_from_string(data)

    def get_file(self, key: str, path: str) -> None:
        self._bucket.blob(key).download_to_filename(path)

    def get_bytes(self, key: str) -> bytes | None:
        blob = self._bucket.get_blob(key)
        if blob is None:
            return None
        data: bytes = blob.download_as_bytes()
        return data

    def list_prefix(self, prefix: str) -> dict[str, int]:
        return {b.name: int(b.size or 0) for b in self._bucket.list_blobs(prefix=prefix)}

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            blob = self._bucket.blob(key)
            if blob.exists():
                blob.delete()


class GCSStorageManager(CloudStorageManager):
    """Checkpoints under ``gs://<bucket>/<prefix>/<storage_id>/``. Raises ImportError naming
    the ``[gcs]`` extra when google-cloud-storage is missing."""

    def __init__(self, bucket: str, prefix: str | None = None, temp_dir: str | None = None) -> None:
        super().__init__(_GCSStore(bucket), prefix, temp_dir)
