"""Task ids as people type them: the whole id, or a prefix of it that names one task (``det
notebook logs 845dac90``: the eight characters ``det task list`` and task descriptions show).

Every parser argument that takes a task id is declared ``type=TaskRef``; :func:`resolve_args`
(called once by ``det``'s ``main`` before the command runs) replaces each by the whole id. The
resolution lives here, in the CLI, not in the master: the master's REST paths keep taking
exact ids, as 0.37's do (its clients, the proxy's ``/proxy/<id>/`` and the web UI rely on an
id naming one task for good, where a prefix could name another task tomorrow), and one helper
here covers every ``det`` command that takes one.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from determined.cli import _render
from determined.common.api import _routes

# det's kind names -> the list route of that kind
_LISTS: dict[str, _routes.TaskNoun] = {
    "command": "commands",
    "notebook": "notebooks",
    "shell": "shells",
    "tensorboard": "tensorboards",
}
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class TaskRef(str):
    """A task id as given on the command line: the whole id or a unique prefix."""

    __slots__ = ()


def candidates(sess: Any, kind: str | None = None) -> dict[str, str]:
    """The task ids a prefix may name, each with what it is: the tasks of ``kind`` (a key of
    ``_LISTS``), or with None every command, notebook, shell and TensorBoard, and every task
    with a live allocation (generic tasks, trials)."""
    found: dict[str, str] = {}
    for name, noun in _LISTS.items():
        if kind is not None and kind != name:
            continue
        for item in _routes.list_ntsc(sess, noun):
            found[str(item["id"])] = f"{name}, {str(item.get('state', '')).removeprefix('STATE_')}"
    if kind is None:
        summaries = _routes.list_allocations(sess)
        for summary in summaries.values():
            found.setdefault(str(summary.get("taskId")), str(summary.get("name") or "task"))
    return found


def resolve(sess: Any, given: str, kind: str | None = None) -> str:
    """The whole id of the one task whose id is or starts with ``given``; ``given`` itself
    when no listed task matches (the master then says what it knows of it).

    Raises:
        CliError: an empty id, or a prefix that more than one task's id starts with.
    """
    text = given.strip()
    if not text:
        raise _render.CliError("a task id is empty: give the id (or its first characters)")
    if _UUID.match(text.lower()):
        return text
    known = candidates(sess, kind)
    if text in known:
        return text
    matches = sorted(i for i in known if i.startswith(text))
    if len(matches) == 1:
        return matches[0]
    if not matches:
        return text
    what = kind or "task"
    shown = "; ".join(f"{i} ({known[i]})" for i in matches[:10])
    more = f"; and {len(matches) - 10} more" if len(matches) > 10 else ""
    raise _render.CliError(
        f"{what} id {text!r} is ambiguous: {len(matches)} ids start with it: {shown}{more}. "
        "Give more of the id."
    )


def resolve_args(args: argparse.Namespace, sess_of: Any) -> None:
    """Replace every :class:`TaskRef` in ``args`` (and in its lists) by the whole id;
    ``sess_of(args)`` gives the session, made only when there is one to resolve."""
    refs = {
        name: value
        for name, value in vars(args).items()
        if isinstance(value, TaskRef)
        or (isinstance(value, list) and any(isinstance(v, TaskRef) for v in value))
    }
    if not refs:
        return
    sess = sess_of(args)
    kind = getattr(args, "kind", None)
    kind = kind if kind in _LISTS else None
    for name, value in refs.items():
        if isinstance(value, list):
            resolved = [resolve(sess, v, kind) if isinstance(v, TaskRef) else v for v in value]
            setattr(args, name, resolved)
        else:
            setattr(args, name, resolve(sess, value, kind))
