"""``det``'s command tree against Determined 0.37's (issue #15 item 5): every reference command
exists here under each of its names, with every flag and the same number of positionals. The
reference's tree is frozen in tests/fixtures/reference_cli/tree.json (regenerate with the script
beside it). What is not built yet is PENDING (the issue that builds it); what we leave out on
purpose is in KNOWN_DIFFERENCES with the reason, and docs/reference/compatibility.md says so."""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

from determined.cli._main import _parser

FIXTURE = pathlib.Path(__file__).parents[1] / "fixtures" / "reference_cli"
sys.path.insert(0, str(FIXTURE))
from cli_tree import tree  # noqa: E402

# Commands of 0.37 that only its enterprise edition or its container runtime served.
KNOWN_DIFFERENCES = {
    "det auth": "single sign-on (SAML/OIDC) was in the enterprise edition",
    "det oauth": "OAuth clients were in the enterprise edition",
    "det rbac": "role-based access control was in the enterprise edition; here an experiment's "
    "owner or an admin acts on it (docs/security.md)",
    "det user-group": "user groups belong to the enterprise edition's RBAC",
    "det dev bindings": "0.37's bindings are generated from its protobuf API; ours are not",
    "det user link-with-agent-user": "tasks run as the master's own OS user: there are no "
    "agent users to link",
    "det workspace bindings": "workspace-to-Kubernetes-namespace bindings need the Kubernetes "
    "resource manager, which this master does not have",
    "det workspace resource-quota": "Kubernetes resource quotas, as above",
    "det workspace list-members": "users and groups with roles in a workspace belong to the "
    "enterprise edition's RBAC",
}

# Not built yet (named in the closing note of the session that resolved the issue they came
# from, for a later one): where they differ from 0.37's tree.
PENDING: dict[str, str] = {}


def _covered(path: str, table: dict[str, Any]) -> bool:
    return any(path == k or path.startswith(k + " ") for k in table)


def differences() -> list[str]:
    reference = json.loads((FIXTURE / "tree.json").read_text())
    ours = tree(_parser())
    found: list[str] = []

    def walk(ref: dict[str, Any], mine: dict[str, Any], path: str) -> None:
        for opt in ref["options"]:
            if opt not in mine["options"]:
                found.append(f"{path} {opt}")
        if len(ref["positionals"]) != len(mine["positionals"]):
            found.append(f"{path}: positionals {ref['positionals']}, here {mine['positionals']}")
        for child in ref["children"]:
            name = max(child["names"], key=len)
            match = [c for c in mine["children"] if set(c["names"]) & set(child["names"])]
            if not match:
                found.append(f"{path} {name}")
                continue
            missing = sorted(set(child["names"]) - set(match[0]["names"]))
            if missing:
                found.append(f"{path} {name}: no alias {', '.join(missing)}")
            walk(child, match[0], f"{path} {name}")

    walk(reference, ours, "det")
    return found


def test_every_reference_command_and_flag_is_here() -> None:
    open_ = [
        d for d in differences() if not _covered(d, KNOWN_DIFFERENCES) and not _covered(d, PENDING)
    ]
    assert not open_, "det differs from 0.37's command tree:\n" + "\n".join(open_)


def test_pending_entries_are_still_missing() -> None:
    """A command built since leaves PENDING, so the check above covers it from then on."""
    found = differences()
    settled = [k for k in PENDING if not any(d == k or d.startswith(k + " ") for d in found)]
    assert not settled, f"built now, remove from PENDING: {settled}"
