"""``ResourcePool``: a named pool of slots (0.37's ``client.ResourcePool``). This master has
one pool, bound to no workspace, so every workspace may use it."""

from __future__ import annotations

from determined.common.api import Session


class ResourcePoolBindingError(RuntimeError):
    """Binding pools to workspaces: this master has one pool, open to every workspace, and no
    bindings to change."""


class ResourcePool:
    """A resource pool by name; ``Workspace.list_pools()`` returns them."""

    def __init__(self, session: Session, name: str = "") -> None:
        self.name = name
        self._session = session

    def _refuse(self, action: str) -> ResourcePoolBindingError:
        return ResourcePoolBindingError(
            f"cannot {action} pool {self.name!r}: this master has one resource pool, open to "
            "every workspace, and keeps no workspace bindings"
        )

    def add_bindings(self, workspace_names: list[str]) -> None:
        raise self._refuse("bind workspaces to")

    def remove_bindings(self, workspace_names: list[str]) -> None:
        raise self._refuse("unbind workspaces from")

    def replace_bindings(self, workspace_names: list[str]) -> None:
        raise self._refuse("replace the workspace bindings of")

    def list_workspaces(self) -> list[str | None]:
        """The workspaces bound to the pool: none here (0.37 lists none for an unbound pool
        either, though every workspace may use it)."""
        return []

    def __repr__(self) -> str:
        return f"ResourcePool(name={self.name!r})"
