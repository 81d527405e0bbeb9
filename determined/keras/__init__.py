"""``determined.keras`` is not part of redetermined: TensorFlow and Keras are out of scope.

Determined 0.37's ``TFKerasTrial`` and its callbacks have no counterpart here; importing this
module raises ImportError with what to use instead (docs/reference/compatibility.md).
"""

raise ImportError(
    "determined.keras (TFKerasTrial, TensorFlow/Keras) is not part of redetermined: TensorFlow "
    "and Keras are out of scope. Port the model to PyTorch and subclass "
    "determined.pytorch.PyTorchTrial (or drive any framework through the Core API, "
    "determined.core); see docs/reference/compatibility.md"
)
