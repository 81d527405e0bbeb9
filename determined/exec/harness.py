"""``python -m determined.exec.harness module:Class``: train a trial class in a trial process.

Every worker that ``determined.launch.torch_distributed --trial`` starts runs this. The class is
imported from the working directory (the unpacked model definition). A
``determined.pytorch.PyTorchTrial`` is trained by ``determined.pytorch._harness`` (the experiment
config decides every training argument); any other ``det.LegacyTrial`` by its own
``trial_controller_class`` (``determined.exec._legacy``). Exits 0 when training ends
(finished, paused or preempted; the master tells those apart), 1 with a message when the class
cannot be loaded.
"""

from __future__ import annotations

import logging
import sys

import determined as det
from determined import _user_error
from determined.exec._entrypoint import trial_class_from_entrypoint

logger = logging.getLogger("determined.exec.harness")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    if len(argv) != 1:
        print("usage: python -m determined.exec.harness module:Class", file=sys.stderr)
        return 1
    info = det.get_cluster_info()
    if info is None or info.task_type != "TRIAL":
        print("determined.exec.harness runs trials started by a master", file=sys.stderr)
        return 1
    try:
        trial_class = trial_class_from_entrypoint(argv[0])
    except (ValueError, TypeError) as e:
        # ERROR: the level the master records, so `det` shows this line as the cause.
        where = _user_error.location(e)
        print(f"ERROR: cannot load the trial class: {e}{where}", file=sys.stderr)
        return 1
    # A PyTorchTrial can only come from a module that imported determined.pytorch; checking
    # sys.modules keeps torch unimported for other trial classes.
    pytorch = sys.modules.get("determined.pytorch")
    if pytorch is not None and issubclass(trial_class, pytorch.PyTorchTrial):
        from determined.pytorch import _harness

        reason = _harness.run_trial(trial_class, info)
        logger.info(f"training ended: {reason}")
        return 0
    if getattr(trial_class, "trial_controller_class", None) is None:
        print(
            f"ERROR: {argv[0]} has no trial_controller_class: a det.LegacyTrial subclass that "
            "is not a determined.pytorch.PyTorchTrial must name the det.TrialController that "
            "trains it",
            file=sys.stderr,
        )
        return 1
    from determined.exec import _legacy

    _legacy.run_legacy_trial(trial_class, info)
    logger.info("training ended")
    return 0


if __name__ == "__main__":
    sys.exit(main())
