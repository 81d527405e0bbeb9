"""The HTTP client that trials, the CLI and SDKs use to talk to a master."""

from determined.common.api._session import Session, json_safe
from determined.common.api._urls import canonicalize_master_url

__all__ = ["Session", "canonicalize_master_url", "json_safe"]
