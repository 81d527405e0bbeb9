"""The Core API: metrics, checkpoints, searcher operations, preemption and distributed
collectives, usable with a master or without one. Filled in by the modules below."""
