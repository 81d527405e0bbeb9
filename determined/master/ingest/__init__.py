"""Metric ingestion, below the API: a report route parses and authorises, then hands the
report to :class:`Ingest`, which group-commits it (in the write worker when one runs), checks
the metric-threshold webhooks in the same transaction, and tells ``/stream`` and the searcher.

Modules: ``_report`` (one report's write, runs of them written together), ``_offload`` (the
group commit's offload to the write worker, and what the worker runs), ``_write_worker`` (that
process), ``_ingest`` (the whole path of one report). The write worker imports this package and
the store, never the web stack (``tests/master/test_ingest_imports.py``).
"""

from determined.master.ingest._ingest import Ingest
from determined.master.ingest._offload import KEPT_TRIALS, ReportOffload, write_plain_reports
from determined.master.ingest._report import MetricsHook, Report, ReportWrite, write_reports
from determined.master.ingest._write_worker import OutcomeUnknown, WriteWorker

__all__ = [
    "KEPT_TRIALS",
    "Ingest",
    "MetricsHook",
    "OutcomeUnknown",
    "Report",
    "ReportOffload",
    "ReportWrite",
    "WriteWorker",
    "write_plain_reports",
    "write_reports",
]
