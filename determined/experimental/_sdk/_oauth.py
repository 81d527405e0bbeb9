"""OAuth clients (SCIM provisioning): an enterprise-edition feature in 0.37, so its
open-source SDK and ours raise :class:`determined.errors.EnterpriseOnlyError` for them."""

from __future__ import annotations

from determined.errors import EnterpriseOnlyError


class Oauth2ScimClient:
    """One OAuth client, as 0.37 returns it (only the enterprise edition's master makes them)."""

    def __init__(self, client_id: str, domain: str, name: str, secret: str | None = None) -> None:
        self.id = client_id
        self.secret = secret
        self.domain = domain
        self.name = name

    def __repr__(self) -> str:
        return f"Oauth2ScimClient(id={self.id!r}, domain={self.domain!r}, name={self.name!r})"


def refuse(action: str) -> EnterpriseOnlyError:
    return EnterpriseOnlyError(
        f"cannot {action}: OAuth clients (SCIM provisioning) belong to Determined's enterprise "
        "edition, which this master does not implement"
    )
