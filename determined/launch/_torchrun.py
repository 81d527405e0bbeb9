"""``python -m determined.launch._torchrun ARGS``: torchrun (``torch.distributed.run``) with its
failure report cut to one line. When a worker fails, torchrun raises ``ChildFailedError`` and
prints its own traceback and a table of the failure, which would bury the worker's error (its
cause line and traceback come first, from the worker itself)."""

from __future__ import annotations

import sys


def main() -> int:
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        run.main()
    except ChildFailedError as e:
        rank, failure = e.get_first_failure()
        print(
            f"torch_distributed: worker rank {rank} exited with code {failure.exitcode} "
            "(its error is above)",
            file=sys.stderr,
            flush=True,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
