"""One HTTP session to a master, with the auth header, retries and error mapping in one place."""

from __future__ import annotations

import json as _json
import logging
import math
import time
from typing import Any

import requests
import urllib3

from determined import errors

logger = logging.getLogger("determined.common.api")

# Retried: the master restarting, a proxy in front of it, or a long poll dropped by the network.
# A request that may not run twice is retried only on these and on a connection that failed:
# a 500 or a read timeout may come after the master acted on it.
_GATEWAY_STATUSES = frozenset({502, 503, 504})
_IDEMPOTENT_STATUSES = _GATEWAY_STATUSES | {500}
_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})

ALLOCATION_TOKEN_HEADER = "Grpc-Metadata-x-allocation-token"


def json_safe(obj: Any) -> Any:
    """Make a value JSON-encodable the way the master expects.

    NaN and the infinities become the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (the
    grpc-gateway float encoding); numpy scalars and arrays become Python numbers and lists.
    """
    if isinstance(obj, bool) or obj is None or isinstance(obj, (str, int)):
        return obj
    if isinstance(obj, float):
        if math.isnan(obj):
            return "NaN"
        if math.isinf(obj):
            return "Infinity" if obj > 0 else "-Infinity"
        return obj
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    tolist = getattr(obj, "tolist", None)  # numpy scalars and arrays, without importing numpy
    if callable(tolist):
        return json_safe(tolist())
    return obj


def _error_message(resp: requests.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text.strip() or resp.reason
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if body.get("message"):
            return str(body["message"])
    return resp.text.strip()


def _raise_for_status(method: str, path: str, resp: requests.Response) -> None:
    if resp.status_code < 400:
        return
    message = f"{method} {path} failed with HTTP {resp.status_code}: {_error_message(resp)}"
    cls: type[errors.MasterError] = {
        400: errors.BadRequest,
        401: errors.Unauthenticated,
        404: errors.MasterNotFound,
    }.get(resp.status_code, errors.MasterError)
    body: Any
    try:
        body = resp.json()
    except ValueError:
        body = resp.text
    raise cls(message, status=resp.status_code, body=body)


def _never_sent(error: Exception) -> bool:
    """Whether the connection failed before the request could reach the master."""
    if isinstance(error, requests.ConnectTimeout):
        return True
    reason = getattr(error.args[0] if error.args else None, "reason", None)
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


class Session:
    """Requests to one master.

    Args:
        master_url: ``http://host:port`` (a bare ``host:port`` gets ``http://``).
        token: sent as a bearer token; a trial's allocation token goes in Determined's
            ``Grpc-Metadata-x-allocation-token`` header, a user's login token in
            ``Authorization``.
        token_kind: ``"allocation"`` or ``"user"``.
        max_attempts: tries per request (see :meth:`request` for which failures are retried).
        backoff: seconds before the second try; doubled for each later one, capped at 10 s.
        cert: passed to requests as ``verify`` (a CA bundle path, or False for "noverify").
    """

    def __init__(
        self,
        master_url: str,
        token: str | None = None,
        *,
        token_kind: str = "allocation",
        max_attempts: int = 5,
        backoff: float = 0.5,
        timeout: float = 60.0,
        cert: str | bool | None = None,
    ) -> None:
        if token_kind not in ("allocation", "user"):
            raise ValueError(f'token_kind must be "allocation" or "user", not {token_kind!r}')
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, not {max_attempts}")
        if "://" not in master_url:
            master_url = "http://" + master_url
        self.master_url = master_url.rstrip("/")
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.timeout = timeout
        self.token = token
        self._http = requests.Session()
        if cert is not None:
            self._http.verify = cert
        if token:
            if token_kind == "allocation":
                self._http.headers[ALLOCATION_TOKEN_HEADER] = f"Bearer {token}"
            else:
                self._http.headers["Authorization"] = f"Bearer {token}"

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        timeout: float | None = None,
        stream: bool = False,
        idempotent: bool | None = None,
        headers: dict[str, str] | None = None,
    ) -> requests.Response:
        """Send one request; raise a MasterError on 4xx and on the last failure.

        Retried: every request on a failed connection and on 502, 503 and 504 (the master
        restarting, a proxy in front of it); ``idempotent`` ones also on read timeouts and 500.
        ``idempotent`` defaults to the method's nature (GET, PUT, DELETE: yes; POST, PATCH:
        no); a POST the master treats as idempotent (metric and checkpoint reports, a
        completed operation) passes True.

        Raises:
            MasterUnreachable: no answer; ``maybe_delivered`` says whether an attempt may have
                reached the master (only failed connects: False).
        """
        url = self.master_url + "/" + path.lstrip("/")
        if idempotent is None:
            idempotent = method.upper() in _IDEMPOTENT_METHODS
        retry_statuses = _IDEMPOTENT_STATUSES if idempotent else _GATEWAY_STATUSES
        # A JSON body without a Content-Type header, byte for byte what Determined's own client
        # sends; the master parses an untyped body as JSON.
        body = None if json is None else _json.dumps(json_safe(json))
        delay = self.backoff
        maybe_delivered = False
        for attempt in range(1, self.max_attempts + 1):
            last = attempt == self.max_attempts
            try:
                resp = self._http.request(
                    method,
                    url,
                    params=params,
                    data=body,
                    timeout=timeout or self.timeout,
                    stream=stream,
                    headers=headers,
                )
            except (requests.ConnectionError, requests.Timeout) as e:
                maybe_delivered = maybe_delivered or not _never_sent(e)
                read_timeout = isinstance(e, requests.Timeout) and not isinstance(
                    e, requests.ConnectTimeout
                )
                if last or (read_timeout and not idempotent):
                    tries = f"{attempt} attempts" if attempt > 1 else "1 attempt"
                    error = errors.MasterUnreachable(f"{method} {url} failed after {tries}: {e}")
                    error.maybe_delivered = maybe_delivered
                    raise error from e
                logger.debug("%s %s: %s; retrying in %.1fs", method, url, e, delay)
            else:
                if resp.status_code not in retry_statuses or last:
                    _raise_for_status(method, path, resp)
                    return resp
                maybe_delivered = True
                logger.debug("%s %s: HTTP %s; retrying", method, url, resp.status_code)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
        raise errors.InternalException("unreachable: the retry loop always returns or raises")

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> requests.Response:
        """POST; pass ``idempotent=True`` where the endpoint may safely run twice."""
        return self.request("POST", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("PUT", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("DELETE", path, **kwargs)

    def close(self) -> None:
        self._http.close()
