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
        self._name = bucket
        self._gcs = _gcs()  # a missing library fails here, at construction
        self._handle: Any = None

    @property
    def _bucket(self) -> Any:
        # The client is made on first use: building one looks up credentials (perhaps on
        # the metadata server), which a manager that is only built (a config checked, a
        # storage described) must not need. Determined 0.37 builds it in the constructor.
        if self._handle is None:
            self._handle = self._gcs.Client().bucket(self._name)
        return self._handle

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
    the ``[gcs]`` extra when google-cloud-storage is missing. Credentials are looked up at the
    first upload, download or listing, not here (google.auth's DefaultCredentialsError then)."""

    def __init__(self, bucket: str, prefix: str | None = None, temp_dir: str | None = None) -> None:
        super().__init__(_GCSStore(bucket), prefix, temp_dir)
