"""``type: azure``: checkpoints in an Azure Blob Storage container, through azure-storage-blob
(extra ``[azure]``)."""

from __future__ import annotations

import logging
from typing import Any

from determined.common.storage._cloud import CloudStorageManager

# azure-core logs every HTTP request at INFO: keep it out of trial logs, as the reference does.
logging.getLogger("azure").setLevel(logging.WARNING)


def _azure() -> tuple[Any, Any]:
    """(azure.storage.blob, azure.core.exceptions), or ImportError naming the extra."""
    try:
        import azure.core.exceptions
        from azure.storage import blob
    except ImportError as e:
        raise ImportError(
            "checkpoint_storage type azure needs azure-storage-blob, which is not installed; "
            "install the extra with: pip install 'redetermined[azure]'"
        ) from e
    return blob, azure.core.exceptions


class _AzureStore:
    def __init__(
        self,
        container: str,
        connection_string: str | None,
        account_url: str | None,
        credential: str | None,
    ) -> None:
        blob, self._exc = _azure()
        if connection_string:
            service = blob.BlobServiceClient.from_connection_string(connection_string)
        else:
            service = blob.BlobServiceClient(account_url, credential=credential)
        self.location = f"azure://{container}"
        self._container = service.get_container_client(container)
        try:  # as in the reference: a missing container is created
            self._container.create_container()
        except self._exc.ResourceExistsError:
            pass

    def put_file(self, key: str, path: str) -> None:
        with open(path, "rb") as f:
            self._container.upload_blob(key, f, overwrite=True)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._container.upload_blob(key, data, overwrite=True)

    def get_file(self, key: str, path: str) -> None:
        with open(path, "wb") as f:
            self._container.download_blob(key).readinto(f)

    def get_bytes(self, key: str) -> bytes | None:
        try:
            data: bytes = self._container.download_blob(key).readall()
        except self._exc.ResourceNotFoundError:
            return None
        return data

    def list_prefix(self, prefix: str) -> dict[str, int]:
        return {b.name: int(b.size) for b in self._container.list_blobs(name_starts_with=prefix)}

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            try:
                self._container.delete_blob(key)
            except self._exc.ResourceNotFoundError:
                pass  # already gone: deleting is idempotent, as on S3


class AzureStorageManager(CloudStorageManager):
    """Checkpoints as blobs ``<prefix>/<storage_id>/...`` in ``container``, which is created when
    missing. ``container`` may carry a prefix (``"checkpoints/runs"``: container ``checkpoints``,
    blobs under ``runs/``), as in the reference. Connect with ``connection_string``, or with
    ``account_url`` plus an optional ``credential`` (an account key or SAS token; without one,
    the URL itself must grant access). Raises ImportError naming the ``[azure]`` extra when
    azure-storage-blob is missing."""

    def __init__(
        self,
        container: str,
        connection_string: str | None = None,
        account_url: str | None = None,
        credential: str | None = None,
        temp_dir: str | None = None,
    ) -> None:
        name, _, prefix = container.strip("/").partition("/")
        store = _AzureStore(name, connection_string, account_url, credential)
        super().__init__(store, prefix or None, temp_dir)
