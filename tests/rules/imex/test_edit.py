"""The decisions of `nvfabric imex config` (rules.imex.edit), pure, on the shipped configs of
../shared/corpus/imex: where the node list goes, what must stay under the root, which files
are written."""

from __future__ import annotations

import pytest

from nvfabric.model.keyvalue import ConfigValueError
from nvfabric.rules.imex import edit, nodes
from tests.cases import CORPUS

SHIPPED = (CORPUS / "imex/k8s-dra-driver-gpu-imex-daemon-config-2025-01.tmpl.cfg").read_text()
PEERS = (nodes.parse_entry("198.51.100.1"), nodes.parse_entry("198.51.100.2"))


def test_nothing_set_keeps_the_config_and_its_node_list() -> None:
    plan = edit.plan(SHIPPED, (), None)
    assert plan.nodes_path == plan.old_nodes_path == "/etc/nvidia-imex/nodes_config.cfg"
    assert (plan.new_config, plan.rewrite, plan.changes) == (SHIPPED, None, {})
    assert plan.confine() == [("/etc/nvidia-imex/nodes_config.cfg", "IMEX_NODE_CONFIG_FILE")]
    # a given node list is written; the unchanged config is not
    assert edit.files(plan, PEERS, True, "/etc/nvidia-imex/config.cfg", False) == [
        {"path": "/etc/nvidia-imex/nodes_config.cfg",
         "content": "198.51.100.1\n198.51.100.2\n"}]
    assert edit.files(plan, PEERS, False, "/etc/nvidia-imex/config.cfg", False) == []


def test_nodes_config_option_names_the_new_file_in_the_config() -> None:
    plan = edit.plan(SHIPPED, ("DAEMONIZE=0",), "/run/imex/nodes.cfg")
    assert plan.changes == {"DAEMONIZE": "0", "IMEX_NODE_CONFIG_FILE": "/run/imex/nodes.cfg"}
    assert "IMEX_NODE_CONFIG_FILE=/run/imex/nodes.cfg" in plan.new_config.splitlines()
    assert plan.rewrite is None  # the move was asked for explicitly
    assert plan.moves_list(new_file_exists=False) and not plan.moves_list(new_file_exists=True)
    written = edit.files(plan, PEERS, True, "/out.cfg", True)
    assert [f["path"] for f in written] == ["/run/imex/nodes.cfg", "/out.cfg"]
    assert written[1]["content"] == plan.new_config


def test_path_keys_set_must_stay_under_the_root() -> None:
    plan = edit.plan(SHIPPED, ("LOG_FILE_NAME=/var/log/imex.log",), None)
    assert ("/var/log/imex.log", "LOG_FILE_NAME") in plan.confine()


def test_two_options_naming_different_node_lists_are_refused() -> None:
    with pytest.raises(ConfigValueError, match="disagree") as err:
        edit.plan(SHIPPED, ("IMEX_NODE_CONFIG_FILE=/a.cfg",), "/b.cfg")
    assert err.value.key == "IMEX_NODE_CONFIG_FILE"
    assert edit.plan(SHIPPED, ("IMEX_NODE_CONFIG_FILE=/a.cfg",), "/a.cfg").nodes_path == "/a.cfg"


@pytest.mark.parametrize("item", ["NO_SUCH_KEY=1", "DAEMONIZE", "SERVER_PORT=http"])
def test_bad_set_items_are_config_value_errors(item: str) -> None:
    with pytest.raises(ConfigValueError):
        edit.plan(SHIPPED, (item,), None)
