"""A checkpoint's files as one archive, read through its storage manager (every file verified
against the manifest on the way): 0.37's ``GET /checkpoints/{uuid}`` (the SDK's
``DownloadMode.MASTER``) and the web UI's download."""

from __future__ import annotations

import pathlib
import tarfile
import tempfile
import zipfile

from fastapi import APIRouter, BackgroundTasks, Header
from fastapi.responses import FileResponse

from determined.common import storage
from determined.master import resources
from determined.master._errors import ApiError, FailedPrecondition
from determined.master.api._auth import Caller
from determined.master.api._deps import StoreDep
from determined.master.store import Store, _checkpoints

router = APIRouter()

# Accept header -> (archive format, file suffix); 0.37 answers a plain tar when none is asked.
_FORMATS = {
    "application/x-tar": ("tar", ".tar"),
    "application/gzip": ("tgz", ".tar.gz"),
    "application/zip": ("zip", ".zip"),
}
_ANY = ("", "*/*", "application/*")


class UnsupportedMediaType(ApiError, status=415, code=3): ...


def build_archive(store: Store, uuid: str, fmt: str, top: str) -> pathlib.Path:
    """A temporary file holding the checkpoint's files as ``fmt`` (tar, tgz or zip), under
    the directory ``top`` ("" for none); the caller deletes it.

    Raises:
        NotFound: no such checkpoint.
        FailedPrecondition: the checkpoint has no files (not COMPLETED or PARTIALLY_DELETED).
    """
    with store.read() as conn:
        ckpt = _checkpoints.require(conn, uuid)
        if ckpt["state"] not in (_checkpoints.COMPLETED, "STATE_PARTIALLY_DELETED"):
            raise FailedPrecondition(f"checkpoint {uuid} is {ckpt['state']}; it has no files")
        config = resources.checkpoint_storage(conn, ckpt)
    suffix = {"tar": ".tar", "tgz": ".tar.gz", "zip": ".zip"}[fmt]
    fd, name = tempfile.mkstemp(suffix=suffix)
    archive = pathlib.Path(name)
    try:
        with open(fd, "wb") as f, tempfile.TemporaryDirectory() as tmp:
            storage.build(config).download(uuid, tmp)
            if fmt == "zip":
                with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
                    for path in sorted(pathlib.Path(tmp).rglob("*")):
                        rel = path.relative_to(tmp).as_posix()
                        zf.write(path, f"{top}/{rel}" if top else rel)
            else:
                with tarfile.open(fileobj=f, mode="w:gz" if fmt == "tgz" else "w") as tar:
                    if top:
                        tar.add(tmp, arcname=top)
                    else:
                        for path in sorted(pathlib.Path(tmp).iterdir()):
                            tar.add(path, arcname=path.name)
    except BaseException:
        archive.unlink(missing_ok=True)
        raise
    return archive


@router.get("/checkpoints/{uuid}")
def get_checkpoint_files(
    uuid: str,
    caller: Caller,
    store: StoreDep,
    tasks: BackgroundTasks,
    accept: str = Header(""),
) -> FileResponse:
    """0.37's checkpoint download: the files at the archive's top level, as a tar (``Accept``
    absent or any), ``application/gzip`` or ``application/zip``; 415 for another type."""
    caller.require_user()
    wanted = accept.split(";")[0].strip()
    if wanted in _ANY:
        wanted = "application/x-tar"
    if wanted not in _FORMATS:
        raise UnsupportedMediaType(
            f"unsupported media type to download a checkpoint: {accept!r}; ask for one of "
            f"{', '.join(_FORMATS)}"
        )
    fmt, suffix = _FORMATS[wanted]
    archive = build_archive(store, uuid, fmt, "")
    tasks.add_task(archive.unlink, missing_ok=True)
    return FileResponse(archive, filename=f"{uuid}{suffix}", media_type=wanted)
