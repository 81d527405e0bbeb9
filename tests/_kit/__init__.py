"""Helpers of the test suite, imported as ``from _kit.master import MasterProcess``.

pyproject.toml puts tests/ on ``sys.path`` (pytest's ``pythonpath``), so ``_kit`` imports the same
way in test modules, conftests and the rank processes a forkserver starts. Scripts that tests
run by path (``ddp_worker.py``, ``cluster_worker.py``) put tests/ on ``sys.path`` themselves.
"""
