"""The IMEX facts of one node as a JSON section, for ``nvfabric imex`` and for other commands
(``nvfabric status`` may carry it as its ``imex`` key so that ``nvfabric domain check`` can
group nodes by node list). Reads the host through :mod:`nvfabric.facts.imexhost`.
"""

from __future__ import annotations

from typing import Any

from nvfabric.facts import imexhost as host
from nvfabric.rules.imex import channels, config, nodes, owner
from nvfabric.rules.imex.domain import node_list_id
from nvfabric.rules.imex.tables import CONFIG_PATH, NODES_CONFIG_PATH


def node_list(root: str, config_path: str = CONFIG_PATH) -> tuple[str, tuple[nodes.Peer, ...]]:
    """(path, entries) of the node list the IMEX config names (nodes_config.cfg); entries ()
    when the file is missing. Raises nodes.PeerError when an entry is malformed."""
    path = config.node_config_path(host.read_file(root, config_path), NODES_CONFIG_PATH)
    text = host.read_file(root, path)
    return path, nodes.parse_nodes_config(text) if text is not None else ()


def section(root: str, config_path: str = CONFIG_PATH) -> dict[str, Any]:
    """``{"owner", "owner_evidence", "node_list_path", "node_list", "node_list_id",
    "channels"}``; a malformed node list is reported in ``node_list_error``, never raised."""
    decision = owner.decide(host.gather_evidence(root))
    facts = host.read_channels(root)
    out: dict[str, Any] = {
        "owner": decision.owner,
        "owner_evidence": list(decision.evidence),
        "node_list_path": None,
        "node_list": [],
        "node_list_id": None,
        "channels": facts.to_json(),
        "channel_findings": [f.to_json() for f in channels.check(facts)],
    }
    try:
        path, entries = node_list(root, config_path)
    except nodes.PeerError as err:
        out["node_list_error"] = str(err)
        return out
    out["node_list_path"] = path
    out["node_list"] = [p.text for p in entries]
    out["node_list_id"] = node_list_id(p.text for p in entries) if entries else None
    return out
