"""Secrets in experiment configs: hidden in what the API shows, restored when a redacted
config comes back.

Hidden: the credentials of ``checkpoint_storage`` (``SECRET_KEYS``) and the values of
``environment.environment_variables`` (a list ``NAME=value``, or such lists per accelerator,
or a mapping), replaced by ``PLACEHOLDER`` (0.37's ``********``). Everyone but the
experiment's own trials (their allocation tokens) sees experiment configs redacted; task and
template configs are whole for their owner and admins, redacted for other users (``shown``).

A config that a client read redacted and sends back (``det e continue`` with a described
config, a web UI fork with ``parentId``) carries the placeholder where a secret was:
``restore`` puts the stored secret back, or refuses the config (400) when there is none to put
back, so the placeholder is never stored over a secret.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from determined.master._errors import InvalidArgument

PLACEHOLDER = "********"
SECRET_KEYS = frozenset(
    {
        "secret_key",
        "access_key",
        "connection_string",
        "credential",
        "account_key",
        "sas_token",
        "password",
    }
)


def _env_entry(entry: Any) -> Any:
    if isinstance(entry, str) and "=" in entry:
        return entry.split("=", 1)[0] + "=" + PLACEHOLDER
    return entry


def _redact_env(env: Any) -> Any:
    if isinstance(env, list):
        return [_env_entry(e) for e in env]
    if isinstance(env, dict):
        if all(isinstance(v, (list, type(None))) for v in env.values()):  # per accelerator
            return {k: None if v is None else [_env_entry(e) for e in v] for k, v in env.items()}
        return {k: PLACEHOLDER for k in env}
    return env


def redact_storage(storage: dict[str, Any] | None) -> dict[str, Any] | None:
    """A checkpoint storage section with its secrets replaced (None stays None)."""
    if storage is None:
        return None
    return {
        k: PLACEHOLDER if k in SECRET_KEYS and v not in (None, "") else v
        for k, v in storage.items()
    }


def _secret_values(config: dict[str, Any]) -> set[str]:
    """The secret strings of a config: its storage credentials and environment values."""
    found: set[str] = set()
    storage = config.get("checkpoint_storage")
    if isinstance(storage, dict):
        found.update(str(v) for k, v in storage.items() if k in SECRET_KEYS and v not in (None, ""))
    found.update(v for v in _env_map(_env_of(config)).values() if v)
    return found


def _scrub(value: Any, secrets: set[str]) -> Any:
    """``value`` with every string that is a secret (or ``NAME=<secret>``) replaced: a YAML
    anchor defined elsewhere in the config and reused for ``checkpoint_storage`` or the
    environment leaves a copy of the secret where the anchor is defined."""
    if isinstance(value, str):
        if value in secrets:
            return PLACEHOLDER
        name, eq, rest = value.partition("=")
        return f"{name}={PLACEHOLDER}" if eq and rest in secrets else value
    if isinstance(value, dict):
        return {k: _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, secrets) for v in value]
    return value


def redact(config: Any) -> Any:
    """A copy of an experiment config (a mapping) with its secrets replaced, wherever else in
    the config the same secret strings appear too."""
    if not isinstance(config, dict):
        return config
    secrets = _secret_values(config)
    out = dict(config)
    if isinstance(out.get("checkpoint_storage"), dict):
        out["checkpoint_storage"] = redact_storage(out["checkpoint_storage"])
    env = out.get("environment")
    if isinstance(env, dict) and "environment_variables" in env:
        out["environment"] = {
            **env,
            "environment_variables": _redact_env(env["environment_variables"]),
        }
    if secrets:  # elsewhere: the sections above are redacted (and restored) key by key
        out = {
            k: v if k in ("checkpoint_storage", "environment") else _scrub(v, secrets)
            for k, v in out.items()
        }
    return out


def shown(config: Any, whole: bool) -> Any:
    """A task's or template's config as one caller sees it: whole for those who may change it
    (``whole``: its owner or an admin, ``Principal.owns``; 0.37 shows them what they wrote,
    ``SHOULDBE=SET``), redacted for everyone else."""
    return config if whole else redact(config)


def redact_text(text: str) -> str:
    """The config as the user wrote it (YAML), redacted. Text without secrets is returned as
    it is; text with some is rewritten from its parsed form (comments go)."""
    if "environment_variables" not in text and not any(k in text for k in SECRET_KEYS):
        return text  # no YAML parse for most configs (listings render many)
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if not isinstance(parsed, dict):
        return text
    hidden = redact(parsed)
    if hidden == parsed:
        return text
    return str(yaml.safe_dump(hidden, sort_keys=False, default_flow_style=False))


def _env_map(env: Any) -> dict[tuple[str, str], str]:
    """(section, NAME) -> value of every ``NAME=value`` entry, for restoring."""
    out: dict[tuple[str, str], str] = {}
    sections = env.items() if isinstance(env, dict) else [("", env)]
    for section, entries in sections:
        if isinstance(entries, list):
            for e in entries:
                if isinstance(e, str) and "=" in e:
                    name, value = e.split("=", 1)
                    out[(section, name)] = value
        elif isinstance(entries, str):
            out[("", section)] = entries
    return out


def _missing(where: str) -> InvalidArgument:
    return InvalidArgument(
        f"{where} is the redaction placeholder {PLACEHOLDER!r} and there is no stored secret "
        "to put back; write the real value in the config"
    )


def restore(config: dict[str, Any], source: dict[str, Any] | None) -> dict[str, Any]:
    """``config`` with every placeholder replaced by ``source``'s value at the same place (the
    experiment it continues or forks). Raises InvalidArgument (400) for a placeholder with
    nothing to restore."""
    if not _has_placeholder(config.get("checkpoint_storage")) and not _has_placeholder(
        _env_of(config)
    ):
        return config
    out = copy.deepcopy(config)
    old = source or {}
    storage = out.get("checkpoint_storage")
    if isinstance(storage, dict):
        old_storage = old.get("checkpoint_storage") or {}
        for key, value in storage.items():
            if value == PLACEHOLDER:
                if key not in SECRET_KEYS or not old_storage.get(key):
                    raise _missing(f"checkpoint_storage.{key}")
                storage[key] = old_storage[key]
    env = _env_of(out)
    if env is not None:
        old_env = _env_map(_env_of(old))
        sections = env.items() if isinstance(env, dict) else [("", env)]
        for section, entries in list(sections):
            if isinstance(entries, list):
                for i, e in enumerate(entries):
                    if isinstance(e, str) and e.endswith("=" + PLACEHOLDER):
                        name = e.split("=", 1)[0]
                        if (section, name) not in old_env:
                            raise _missing(f"environment_variables {name}")
                        entries[i] = f"{name}={old_env[(section, name)]}"
            elif entries == PLACEHOLDER and isinstance(env, dict):
                if ("", section) not in old_env:
                    raise _missing(f"environment_variables {section}")
                env[section] = old_env[("", section)]
    return out


def _env_of(config: dict[str, Any]) -> Any:
    env = config.get("environment")
    return env.get("environment_variables") if isinstance(env, dict) else None


def _has_placeholder(value: Any) -> bool:
    if isinstance(value, str):
        return value == PLACEHOLDER or value.endswith("=" + PLACEHOLDER)
    if isinstance(value, dict):
        return any(_has_placeholder(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_placeholder(v) for v in value)
    return False
