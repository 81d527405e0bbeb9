"""One rank of the two-rank local cells of tests/pytorch/test_resume_matrix.py: every kind's
uninterrupted run and its resumed runs, over gloo. Run as ``python resume_worker.py OUT_JSON``
with torchrun's environment variables set."""

from __future__ import annotations

import os
import pathlib
import sys

import torch
import torch.distributed as tdist

# Run as a script: tests/ on sys.path makes ``_kit`` importable.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _kit import resume_matrix  # noqa: E402


def main() -> None:
    torch.set_num_threads(1)
    tdist.init_process_group("gloo")
    out = {kind: resume_matrix.cells(kind, ranks=2) for kind in resume_matrix.KINDS}
    resume_matrix.to_json(pathlib.Path(sys.argv[1]), out)
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
