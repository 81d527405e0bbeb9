"""Launchers that start a trial's worker processes: ``torch_distributed`` (torchrun, one process
per slot) and ``wrap_rank`` (prefixes each output line with the worker's rank)."""
