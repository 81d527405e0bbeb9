"""Merging what the ranks of a sharded checkpoint bring: metadata dicts and file lists.

The rules are the reference's: nested dicts merge, equal values are fine, anything else under
the same key is a "metadata conflict" named by its key path (``/a/b``). Two ranks may bring the
same directory; the same file from two ranks is fine only when the copies are identical (md5,
compared across ranks in sorted path order), and then the lowest rank stores it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

from determined.core._distributed import DistributedContext

_IS_DIRECTORY = "<directory>"  # never equal to an md5, so a file/dir clash stays a conflict


def merge_metadata(
    all_metadata: list[Mapping[str, Any]],
) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """Merge per-rank metadata (index = rank). Returns ``(merged, conflicts)`` where conflicts
    maps a key path like ``/a/b`` to the ranks that gave that key, in rank order."""
    merged: dict[str, Any] = {}
    owners: dict[str, list[int]] = {}
    conflicts: dict[str, list[int]] = {}
    for rank, metadata in enumerate(all_metadata):
        _merge_into(merged, metadata, rank, "", owners, conflicts)
    return merged, conflicts


def _merge_into(
    dst: dict[str, Any],
    src: Mapping[str, Any],
    rank: int,
    path: str,
    owners: dict[str, list[int]],
    conflicts: dict[str, list[int]],
) -> None:
    for key, value in src.items():
        key_path = f"{path}/{key}"
        owners.setdefault(key_path, []).append(rank)
        if isinstance(value, Mapping) and isinstance(dst.get(key, {}), dict):
            _merge_into(dst.setdefault(key, {}), value, rank, key_path, owners, conflicts)
        elif key in dst and dst[key] != value:
            conflicts[key_path] = list(owners[key_path])
        else:
            dst[key] = value


def merge_resources(
    all_resources: list[Mapping[str, int]],
) -> tuple[dict[str, int], dict[str, list[int]]]:
    """Merge per-rank resource maps (relative path -> size; directories end in ``/``).
    Returns ``(merged, conflicts)``: conflicts maps each file name that more than one rank
    brings (as a file, or as a file against another's directory) to those ranks."""
    merged: dict[str, int] = {}
    files: set[str] = set()
    holders: dict[str, list[int]] = {}
    for rank, resources in enumerate(all_resources):
        for name, size in resources.items():
            bare = name.rstrip("/")
            if not name.endswith("/"):
                files.add(bare)
            holders.setdefault(bare, []).append(rank)
            merged[name] = size
    conflicts = {name: holders[name] for name in sorted(files) if len(holders[name]) > 1}
    return merged, conflicts


def conflict_error(
    dist: DistributedContext, conflicts: Mapping[str, list[int]], kind: str
) -> RuntimeError:
    """The reference's "refusing to upload with <kind> conflicts" error; the chief's message
    lists each conflict on its own line."""
    hint = (
        "give each rank distinct file names (or a selector)"
        if kind == "files"
        else "give each rank distinct metadata keys, or equal values"
    )
    if dist.get_rank() > 0:
        return RuntimeError(f"refusing to upload with {kind} conflicts: {dict(conflicts)}; {hint}")
    lines = [f"    {name} uploaded by ranks {ranks}" for name, ranks in sorted(conflicts.items())]
    return RuntimeError(
        f"refusing to upload with {kind} conflicts:\n" + "\n".join(lines) + f"\n{hint}"
    )


def _md5(path: str) -> str:
    if os.path.isdir(path):
        return _IS_DIRECTORY
    h = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


def resolve_file_conflicts(
    dist: DistributedContext,
    resources: dict[str, int],
    conflicts: Mapping[str, list[int]],
    ckpt_dir: str | None,
) -> dict[str, int]:
    """A collective: every rank calls it with the same ``conflicts``. Identical copies of a
    file are not a conflict, and only the lowest rank holding one keeps it in its returned
    ``resources``; different copies raise the "files conflicts" RuntimeError on every rank."""
    remaining: dict[str, list[int]] = {}
    for name in sorted(conflicts):
        ranks = conflicts[name]
        mine = None
        if dist.get_rank() in ranks and ckpt_dir is not None:
            mine = _md5(os.path.join(ckpt_dir, name))
        digests = {d for d in dist.allgather(mine) if d is not None}
        if len(digests) > 1 or _IS_DIRECTORY in digests:
            remaining[name] = ranks
    if remaining:
        raise conflict_error(dist, remaining, "files")
    rank = dist.get_rank()
    return {k: v for k, v in resources.items() if k not in conflicts or min(conflicts[k]) == rank}
