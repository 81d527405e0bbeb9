"""Agents and slots an admin disabled or set draining (0.37's enable/disable), kept across
master restarts. An agent's own row has ``slot_id`` ''; enabling removes the row."""

from __future__ import annotations

import dataclasses

import sqlalchemy as sa

from determined.master.store._schema import agent_states

AGENT = ""  # the slot_id of an agent's own row


@dataclasses.dataclass(frozen=True)
class Toggle:
    """Whether an agent or slot takes new work (``enabled``) and, when not, whether the work
    running there may finish (``draining``) or is killed."""

    enabled: bool = True
    draining: bool = False


def set_state(conn: sa.Connection, agent_id: str, slot_id: str, toggle: Toggle) -> None:
    """Record an agent's (``slot_id`` :data:`AGENT`) or a slot's state."""
    key = (agent_states.c.agent_id == agent_id) & (agent_states.c.slot_id == slot_id)
    conn.execute(agent_states.delete().where(key))
    if not toggle.enabled:
        conn.execute(
            agent_states.insert().values(
                agent_id=agent_id, slot_id=slot_id, enabled=False, draining=toggle.draining
            )
        )


def all_states(conn: sa.Connection) -> dict[tuple[str, str], Toggle]:
    """``(agent id, slot id) -> Toggle`` for every agent or slot not plainly enabled."""
    rows = conn.execute(sa.select(agent_states)).mappings()
    return {
        (str(r["agent_id"]), str(r["slot_id"])): Toggle(bool(r["enabled"]), bool(r["draining"]))
        for r in rows
    }
