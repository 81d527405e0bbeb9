"""The config of a new experiment, resolved once: the YAML text a user sent, with the secrets
of the experiment it forks put back, laid over a template, given its workspace's defaults and
parsed into the typed, defaulted :class:`~determined.common.expconf.ExperimentConfig` that the
master stores and its trials receive (docs/config.md, "Where a config comes from")."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from determined.common import expconf
from determined.master import experiment
from determined.master._errors import ApiError, InvalidArgument
from determined.master.api import _redact

# The workspace of a config's project (its row: ``checkpoint_storage_config``,
# ``default_compute_pool``), found from the config's own ``workspace``/``project`` keys.
WorkspaceOf = Callable[[dict[str, Any]], Mapping[str, Any]]


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A resolved config: ``config`` is what the experiment runs under; ``original`` the text
    kept as its ``originalConfig`` (the user's own text, or, when secrets were put back or a
    template laid under it, that merge written out again); ``restored`` says whether secrets
    came from the parent (only its owner may reuse them)."""

    config: expconf.ExperimentConfig
    original: str
    restored: bool


def resolve(
    text: str,
    parent: Mapping[str, Any] | None = None,
    template: Mapping[str, Any] | None = None,
    workspace: WorkspaceOf | None = None,
    defaults: experiment.ContainerDefaults | None = None,
) -> Resolved:
    """Resolve ``text`` (YAML) into the config a new experiment runs under, loading and parsing
    it once, in 0.37's order: ``parent``'s secrets fill the placeholders of a config that was
    read redacted; the result is laid over ``template`` (mappings merge, the config wins); the
    workspace's checkpoint storage goes under the config's own and its default compute pool
    becomes ``resources.resource_pool`` where the config names none; the master config's
    ``task_container_defaults`` of that pool (``defaults``) go under what it leaves unset;
    then every default.

    Raises:
        InvalidArgument: bad YAML, a placeholder with nothing to restore, or a config that does
            not validate (the message names each field). A config error is reported before an
            error of ``workspace`` (an unknown project, say), as the config is the first thing
            a user fixes.
    """
    raw = experiment.load_yaml(text, "config")
    if not isinstance(raw, dict):
        return Resolved(experiment.parse_config(text), text, False)  # it says what is wrong
    _refuse_slots(raw)
    restored = _redact.restore(raw, dict(parent) if parent is not None else None)
    merged = restored
    if template is not None:
        merged = experiment.merge_configs(dict(template), restored)
    original = text
    if merged is not raw:
        original = str(yaml.safe_dump(merged, sort_keys=False))
    if workspace is not None:
        try:
            found = workspace(merged)
        except ApiError:
            experiment.parse_config(merged)
            raise
        merged = _with_workspace_defaults(merged, found)
    if defaults is not None:
        merged = defaults.apply(merged)
    return Resolved(experiment.parse_config(merged), original, restored is not raw)


def _refuse_slots(raw: Mapping[str, Any]) -> None:
    """0.37 refuses ``resources.slots`` in the config a user sends (it is for commands), before
    the template is laid under it: a template may carry one (it is kept, and unused by trials).
    """
    resources = raw.get("resources")
    if isinstance(resources, Mapping) and resources.get("slots") is not None:
        raise InvalidArgument(
            '<config>.resources: additionalProperties "slots" not allowed (resources.slots is '
            "for commands and notebooks; experiments use resources.slots_per_trial)"
        )


def _with_workspace_defaults(raw: dict[str, Any], workspace: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` with the workspace's defaults for what it leaves out (0.37): its checkpoint
    storage laid under the config's own ``checkpoint_storage`` when both are of one type (or the
    config's names none), and its default compute pool as ``resources.resource_pool``."""
    storage = workspace.get("checkpoint_storage_config")
    pool = workspace.get("default_compute_pool")
    if not storage and not pool:
        return raw
    merged = dict(raw)
    own = raw.get("checkpoint_storage")
    if storage and not own:
        merged["checkpoint_storage"] = storage
    elif (
        storage
        and isinstance(own, dict)
        and own.get("type", storage.get("type")) == storage.get("type")
    ):
        # Another type replaces the workspace's whole, as 0.37 merges a union.
        merged["checkpoint_storage"] = experiment.merge_configs(dict(storage), own)
    if pool:
        resources = dict(raw.get("resources") or {})
        resources.setdefault("resource_pool", pool)
        merged["resources"] = resources
    return merged
