"""``determined.experimental``: the Python SDK (``client``) and ``core_v2``."""
