"""What ``nvfabric imex config`` changes: the decisions, as pure functions of values.

From the shipped config.cfg text, the ``--set KEY=VALUE`` items, ``--nodes-config`` and
``--output``: the effective config, where the node list goes (and whether the config is
pointed at a new node list file), which paths must stay under the root, and which files are
written with which content. Reading the files and writing them is the caller's
(:mod:`nvfabric.facts.imex.tray`, :mod:`nvfabric.effects.imex`); nothing here touches the host.

Rules (NVIDIA IMEX guide, "IMEX Configuration Settings"; docs/commands/imex.md):

- the node list goes to ``--nodes-config``, else ``--set IMEX_NODE_CONFIG_FILE=``, else the
  file the config names now (``IMEX_NODE_CONFIG_FILE``, default
  ``/etc/nvidia-imex/nodes_config.cfg``); both options naming different files is an error;
- the config names that file explicitly when it is not the one it names now; a config whose
  node list was moved implicitly gets the :func:`nvfabric.rules.imex.config.node_config_rewrite`
  finding;
- a node list is written when one is given, or when the config is to name a new file that
  does not exist yet (the current list moves there); the config is written when it changes
  or when ``--output`` names another file.
"""

from __future__ import annotations

from dataclasses import dataclass

from nvfabric.model.findings import Finding
from nvfabric.model.keyvalue import ConfigValueError
from nvfabric.rules.imex import config, nodes
from nvfabric.rules.imex.tables import NODES_CONFIG_PATH


@dataclass(frozen=True)
class ConfigEdit:
    """The decided edit of one IMEX config.

    ``changes``: the keys set (``IMEX_NODE_CONFIG_FILE`` added when the node list moves);
    ``nodes_path``: where the node list goes; ``old_nodes_path``: the node list the shipped
    config names; ``rewrite``: the finding of an implicit move, or None; ``new_config``: the
    effective config text; ``shipped``: the config text it was made from.
    """

    changes: dict[str, str]
    nodes_path: str
    old_nodes_path: str
    rewrite: Finding | None
    new_config: str
    shipped: str

    def confine(self) -> list[tuple[str, str]]:
        """(host path, what) of every path of the edit that must stay under the root: the
        path-valued keys set, and the node list."""
        out = [(self.changes[key], key) for key in config.PATH_KEYS if self.changes.get(key)]
        return out + [(self.nodes_path, "IMEX_NODE_CONFIG_FILE")]

    def moves_list(self, new_file_exists: bool) -> bool:
        """True when, no node list being given, the current one must be copied to
        :attr:`nodes_path`: the config is to name another file and that file is not there."""
        return self.nodes_path != self.old_nodes_path and not new_file_exists


def plan(shipped: str, sets: tuple[str, ...], nodes_option: str | None) -> ConfigEdit:
    """The edit of config text ``shipped`` by ``--set`` items ``sets`` and ``--nodes-config``
    ``nodes_option`` (None: not given). Raises ConfigValueError naming the key for a bad
    ``--set`` (unknown key, bad value, malformed item) or disagreeing node list options."""
    changes = config.parse_set(sets)
    config.check_known(shipped, changes)
    old_nodes_path = config.node_config_path(shipped, NODES_CONFIG_PATH)
    explicit = nodes_option is not None or "IMEX_NODE_CONFIG_FILE" in changes
    nodes_path = nodes_path_of(nodes_option, changes, old_nodes_path)
    if nodes_path != config.node_config_path(shipped, ""):
        changes["IMEX_NODE_CONFIG_FILE"] = nodes_path
    rewrite = None if explicit else config.node_config_rewrite(shipped, nodes_path)
    return ConfigEdit(changes, nodes_path, old_nodes_path, rewrite,
                      config.effective(shipped, changes), shipped)


def nodes_path_of(option: str | None, changes: dict[str, str], current: str) -> str:
    """Where the node list goes: ``--nodes-config``, else ``--set IMEX_NODE_CONFIG_FILE=``,
    else the file the config names now. Both options naming different files is an error."""
    key = changes.get("IMEX_NODE_CONFIG_FILE")
    if option is not None and key is not None and key != option:
        raise ConfigValueError("IMEX_NODE_CONFIG_FILE", (
            f"--nodes-config {option} and --set IMEX_NODE_CONFIG_FILE={key} disagree; give "
            "one"))
    return option or key or current


def files(edit: ConfigEdit, node_list: tuple[nodes.Peer, ...], write_list: bool,
          target: str, output_given: bool) -> list[dict[str, str]]:
    """``[{"path", "content"}]`` (host paths) to write, in order: the node list when
    ``write_list`` (given, or moving), then the config at ``target`` when it changes or
    ``--output`` was given."""
    out: list[dict[str, str]] = []
    if write_list:
        out.append({"path": edit.nodes_path, "content": nodes.render(node_list)})
    if edit.new_config != edit.shipped or output_given:
        out.append({"path": target, "content": edit.new_config})
    return out
