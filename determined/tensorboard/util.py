"""``determined.tensorboard.util``: which files are TensorBoard's, and the per-rank names that
keep profiler files of different ranks apart in storage."""

from __future__ import annotations

import logging
import pathlib
import re

logger = logging.getLogger("determined.tensorboard")

TB_FILE_PATTERNS = (
    "*tfevents*",
    "*.trace.json.gz",
    "*.trace.json",
    "*.memory_profile.json.gz",
    "*.pb",
)

# Profiler outputs named after the host: several ranks on one host would collide.
_PROFILER_EXTENSIONS = (
    ".input_pipeline.pb",
    ".memory_profile.json.gz",
    ".tensorflow_stats.pb",
    ".xplane.pb",
    ".kernel_stats.pb",
    ".overview_page.pb",
    ".trace.json.gz",
    ".trace.json",
)
# <worker>[.<span timestamp>].pt.trace.json[.gz]
_TORCH_PROFILE = re.compile(r"^(.*?)(\.\d+)?\.pt\.trace\.json(\.gz)?$")


def find_tb_files(base_dir: pathlib.Path) -> list[pathlib.Path]:
    """TensorBoard's files under ``base_dir`` (event files and profiler traces), recursively."""
    if not base_dir.exists():
        logger.warning(f"{base_dir} does not exist")
        return []
    return [f for pattern in TB_FILE_PATTERNS for f in base_dir.rglob(pattern)]


def get_rank_aware_path(path: pathlib.Path, rank: int) -> pathlib.Path:
    """``path`` with ``#<rank>`` added to the host part of a profiler file's name
    (``host.xplane.pb`` -> ``host#3.xplane.pb``, ``w.123.pt.trace.json`` ->
    ``w#3.123.pt.trace.json``); other paths unchanged."""
    m = _TORCH_PROFILE.match(path.name)
    if m:
        worker, span, gz = m.group(1), m.group(2) or "", m.group(3) or ""
        return path.with_name(f"{worker}#{rank}{span}.pt.trace.json{gz}")
    for ext in _PROFILER_EXTENSIONS:
        if path.name.endswith(ext) and len(path.name) > len(ext):
            return path.with_name(f"{path.name[: -len(ext)]}#{rank}{ext}")
    return path
