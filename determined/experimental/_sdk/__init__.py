"""The SDK's private modules, one per object; the public names are in
``determined.experimental`` and ``determined.experimental.client``."""
