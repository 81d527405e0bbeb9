"""The redetermined master: HTTP API, store, searcher, resource manager."""

__all__: list[str] = []
