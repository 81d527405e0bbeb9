"""``determined.experimental.metrics``, as 0.37 names it: metric report classes."""

from determined.experimental._sdk._metrics import TrainingMetrics, TrialMetrics, ValidationMetrics

__all__ = ["TrainingMetrics", "TrialMetrics", "ValidationMetrics"]
