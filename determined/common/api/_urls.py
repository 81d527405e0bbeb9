"""Master URLs as a user writes them (``det -m``, ``DET_MASTER``, the SDK's ``master=``) turned
into the one form the client uses everywhere: a scheme, a host, a port, no trailing slash."""

from __future__ import annotations

from urllib import parse

DEFAULT_PORT = 8080


def canonicalize_master_url(url: str) -> str:
    """``host`` -> ``http://host:8080``; ``http://host`` -> ``http://host:80``; ``https://host``
    -> ``https://host:443``; a path is kept without its trailing ``/``. The same master written
    two ways gets one form, so the token store keeps one login for it.

    Raises:
        ValueError: no host, or a user name, password, query or fragment in the URL (the
            message names what to remove).
    """
    text = url.strip()
    if text.startswith("https://"):
        default_port = 443
    elif text.startswith("http://"):
        default_port = 80
    else:
        text, default_port = f"http://{text}", DEFAULT_PORT
    parts = parse.urlparse(text)
    try:
        port = parts.port or default_port
    except ValueError as e:  # a port that is not a number, or out of range
        raise ValueError(f"invalid master url {url!r}: {e}") from None
    if not parts.hostname:
        raise ValueError(
            f"invalid master url {url!r}: it has no host name; write it as host[:port] or "
            "http(s)://host[:port]"
        )
    extras = [
        what
        for what, present in (
            ("a user name", parts.username),
            ("a password", parts.password),
            ("a query", parts.query),
            ("a fragment", parts.fragment),
        )
        if present
    ]
    if extras:
        raise ValueError(
            f"invalid master url {url!r}: remove {' and '.join(extras)}; a master url is "
            "http(s)://host[:port][/path] (log in with `det user login` instead)"
        )
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return parse.urlunparse((parts.scheme, f"{host}:{port}", parts.path, "", "", "")).rstrip("/")
