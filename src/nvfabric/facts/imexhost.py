"""Compatibility: the names of the former ``imexhost`` module, which read and changed the node
for IMEX in one place. Reads now live in :mod:`nvfabric.facts.imex`, the ``nvidia-imex-ctl``
call in :mod:`nvfabric.facts.imexctl`, the changes (channel nodes, config writes, unit
enablement) in :mod:`nvfabric.effects.imex`. New code imports those; this module only
re-exports them so that callers written against the old names keep working.
"""

from __future__ import annotations

from nvfabric.effects.imex import (
    create_channel,
    run_systemctl,
    systemd_running,
    unit_argv,
    write_file,
)
from nvfabric.facts.imex import (
    MAX_CONFIG_BYTES,
    RESOLVE_TIMEOUT_S,
    SYSTEMCTL_TIMEOUT_S,
    UNIT_DIRS,
    PathEscape,
    channel_target,
    confined,
    gather_evidence,
    local_addresses,
    local_names,
    node_addresses,
    node_list,
    not_regular,
    parse_fib_trie,
    parse_hosts,
    parse_if_inet6,
    read_channels,
    read_file,
    resolve_names,
    section,
    shipped_problem,
    stat_node,
    unit_file,
    unit_state,
)
from nvfabric.facts.imexctl import CtlResult, run_ctl

__all__ = [
    "MAX_CONFIG_BYTES", "RESOLVE_TIMEOUT_S", "SYSTEMCTL_TIMEOUT_S", "UNIT_DIRS", "CtlResult",
    "PathEscape", "channel_target", "confined", "create_channel", "gather_evidence",
    "local_addresses", "local_names", "node_addresses", "node_list", "not_regular",
    "parse_fib_trie", "parse_hosts", "parse_if_inet6", "read_channels", "read_file",
    "resolve_names", "run_ctl", "run_systemctl", "section", "shipped_problem", "stat_node",
    "systemd_running", "unit_argv", "unit_file", "unit_state", "write_file",
]
