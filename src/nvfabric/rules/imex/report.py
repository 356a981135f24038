"""The IMEX facts of one node as a JSON section, for ``nvfabric imex`` and for other commands
(``nvfabric status`` may carry it as its ``imex`` key so that ``nvfabric domain check`` can
group nodes by node list). Pure: built from what :func:`nvfabric.facts.imex.tray.section` reads.
"""

from __future__ import annotations

from typing import Any

from nvfabric.rules.imex import channels, nodes
from nvfabric.rules.imex.nodes import node_list_id
from nvfabric.rules.imex.owner import Ownership

#: The node list as read: (path, entries), or the error of a malformed one.
NodeList = tuple[str, tuple[nodes.Peer, ...]] | nodes.PeerError


def section(decision: Ownership, facts: channels.ChannelFacts,
            listed: NodeList) -> dict[str, Any]:
    """``{"owner", "runner", "channel_owner", "run", "owner_evidence", "owner_conflict",
    "owner_unknown", "node_list_path", "node_list", "node_list_id", "channels",
    "channel_findings"}``: the channel findings about the channels the owner needs
    (:attr:`~nvfabric.rules.imex.owner.Ownership.required_channels`); a malformed node list is
    reported in ``node_list_error`` (the path, list and id then stay empty), never raised."""
    out: dict[str, Any] = {
        "owner": decision.owner,
        "runner": decision.runner,
        "channel_owner": decision.channels,
        "run": decision.run.to_json() if decision.run else None,
        "owner_evidence": list(decision.evidence),
        "owner_conflict": decision.conflict.to_json() if decision.conflict else None,
        "owner_unknown": decision.unknown.to_json() if decision.unknown else None,
        "node_list_path": None,
        "node_list": [],
        "node_list_id": None,
        "channels": facts.to_json(),
        "channel_findings": [f.to_json() for f in channels.check(
            facts, decision.required_channels)],
    }
    if isinstance(listed, nodes.PeerError):
        out["node_list_error"] = str(listed)
        return out
    path, entries = listed
    out["node_list_path"] = path
    out["node_list"] = [p.text for p in entries]
    out["node_list_id"] = node_list_id(p.text for p in entries) if entries else None
    return out
