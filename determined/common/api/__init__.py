"""The HTTP client that trials, the CLI and SDKs use to talk to a master."""

from determined.common.api._session import Session, json_safe

__all__ = ["Session", "json_safe"]
