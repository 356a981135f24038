"""IMEX configuration: patching the shipped config.cfg captures (comments and order kept), value
validation, node lists (files, Slurm hostlists, addresses), the host-name driver rule, and the
local-address check of case D07 before anything is written or started."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvfabric.model import keyvalue
from nvfabric.model.keyvalue import ConfigValueError
from nvfabric.rules.imex import config, nodes
from tests.cases import CASES, CORPUS, check_expect
from tests.conftest import run_cli, run_json

IMEX = CORPUS / "imex"
SHIPPED = [
    "k8s-dra-driver-gpu-imex-daemon-config-2025-01.tmpl.cfg",
    "k8s-dra-driver-gpu-compute-domain-daemon-config.tmpl.cfg",
    "aws-parallelcluster-nvidia-imex-config.erb",
]


def d07() -> dict[str, Any]:
    with open(CASES / "D07-imex-no-interface.yaml", encoding="utf-8") as fh:
        case: dict[str, Any] = yaml.safe_load(fh)
    return case


def dra298_node_list() -> str:
    """The node list echoed by the DRA daemon in the capture (the lines after its path)."""
    lines = (IMEX / "imex-570.124.06-nodes-config-echo-and-startup-dra298.log").read_text()
    body = lines.split("nodes_config.cfg:\n", 1)[1]
    return "".join(ln + "\n" for ln in body.splitlines()[:2])


@pytest.mark.parametrize("name", SHIPPED)
def test_run_overrides_change_only_their_keys(name: str) -> None:
    shipped = (IMEX / name).read_text()
    cfg = keyvalue.parse(shipped)
    changes = config.run_overrides(cfg, "/var/lib/nvfabric/imex/nodes_config.cfg")
    out = config.effective(shipped, changes)
    old_lines, new_lines = shipped.splitlines(), out.splitlines()
    assert len(new_lines) >= len(old_lines)
    for old, new in zip(old_lines, new_lines, strict=False):
        if old != new:
            assert new.split("=", 1)[0] in changes, (old, new)
    items = keyvalue.parse(out).items()
    for key, value in changes.items():
        assert items[key] == value
    assert items["DAEMONIZE"] == "0"
    comments = [ln for ln in old_lines if ln.startswith("#")]
    assert comments == [ln for ln in new_lines if ln.startswith("#")][: len(comments)]


def test_commented_out_log_file_is_added_not_uncommented() -> None:
    shipped = (IMEX / "aws-parallelcluster-nvidia-imex-config.erb").read_text()
    out = config.effective(shipped, {"LOG_FILE_NAME": ""})
    assert "# LOG_FILE_NAME=/var/log/nvidia-imex.log" in out
    assert out.rstrip().endswith("# Added by nvfabric\nLOG_FILE_NAME=")


def test_command_port_is_set_only_when_the_file_has_neither_port_nor_socket() -> None:
    shipped = keyvalue.parse((IMEX / SHIPPED[0]).read_text())
    assert "IMEX_CMD_PORT" not in config.run_overrides(shipped, "/n")
    bare = keyvalue.parse("IMEX_CMD_PORT=\nIMEX_CMD_UNIX_DOMAIN_PATH=\n")
    assert config.run_overrides(bare, "/n")["IMEX_CMD_PORT"] == "50005"


@pytest.mark.parametrize("name", SHIPPED)
def test_node_config_path_ignores_template_placeholders(name: str) -> None:
    path = config.node_config_path((IMEX / name).read_text(), "/etc/nvidia-imex/nodes_config.cfg")
    assert path == "/etc/nvidia-imex/nodes_config.cfg"


@pytest.mark.parametrize(
    ("key", "value"),
    [("DAEMONIZE", "2"), ("SERVER_PORT", "70000"), ("BIND_INTERFACE_IP", "eth0"),
     ("IMEX_NODE_CONFIG_FILE", "nodes.cfg"), ("IMEX_NODE_CONFIG_FILE", ""),
     ("LOG_FILE_NAME", "/" + "x" * 300), ("IMEX_WAIT_FOR_QUORUM", "ALL"),
     ("LOG_LEVEL", "9"), ("DAEMONIZE", "0\nIMEX_CMD_PORT=1"), ("BAD KEY", "1")],
)
def test_bad_values_are_refused_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigValueError) as info:
        config.effective("DAEMONIZE=1\n", {key: value})
    assert info.value.key == key


def test_aws_node_list_template_parses() -> None:
    peers = nodes.parse_nodes_config((IMEX / "aws-parallelcluster-nvidia-imex-nodes.erb")
                                     .read_text())
    assert [(p.text, p.kind) for p in peers] == [("198.51.100.1", "ipv4"),
                                                 ("198.51.100.2", "ipv4")]


@pytest.mark.parametrize("entry", ["198.51.100.1; rm -rf /", "http://gb-01", "10.0.0.256",
                                   "gb-01:50000", "-gb", "a b", ""])
def test_bad_node_list_entries_are_refused(entry: str) -> None:
    with pytest.raises(nodes.PeerError):
        nodes.parse_entry(entry)


def test_ipv6_entries_are_normalised() -> None:
    assert nodes.parse_entry("FD00:0::2").text == "fd00::2"


def test_slurm_hostlist_is_expanded_in_order() -> None:
    peers = nodes.expand_slurm("gb-[01-18]")
    assert [p.text for p in peers][:3] == ["gb-01", "gb-02", "gb-03"]
    assert len(peers) == 18 and peers[-1].text == "gb-18"
    assert [p.text for p in nodes.expand_slurm("gb-[01-02],gc7")] == ["gb-01", "gb-02", "gc7"]
    with pytest.raises(nodes.PeerError):
        nodes.expand_slurm("gb-[01-")


@pytest.mark.parametrize(("driver", "ok"), [("570.124.06", False), ("570.158.01", True),
                                            ("580.159.04", True), (None, False)])
def test_host_names_need_driver_570_158_01(driver: str | None, ok: bool) -> None:
    found = nodes.validate(nodes.expand_slurm("gb-[01-02]"), driver)
    assert (found == ()) == ok
    if not ok:
        assert found[0].code == "config_invalid_value"
        assert "570.158.01" in found[0].message


def test_duplicates_are_refused() -> None:
    peers = tuple(nodes.parse_entry(e) for e in ("198.51.100.1", "198.51.100.1"))
    (f,) = nodes.validate(peers, "580.126.20")
    assert f.fields["duplicates"] == ["198.51.100.1"]


@pytest.mark.parametrize(
    ("entries", "local", "names", "ok"),
    [
        (["198.51.100.1", "198.51.100.2"], ["192.0.2.2", "127.0.0.1"], [], False),
        (["198.51.100.1", "198.51.100.2"], ["198.51.100.2"], [], True),
        (["198.51.100.1", "198.51.100.2"], ["198.51.100.1", "198.51.100.2"], [], False),
        (["fe80::1", "fe80::2"], ["fe80::2%eth0"], [], True),
        (["gb-01", "gb-02"], ["192.0.2.2"], ["gb-02.cluster.local"], True),
        (["gb-01", "gb-02"], ["192.0.2.2"], ["gb-03"], False),
    ],
)
def test_exactly_one_entry_must_be_this_host(entries: list[str], local: list[str],
                                             names: list[str], ok: bool) -> None:
    peers = tuple(nodes.parse_entry(e) for e in entries)
    found = nodes.check_local(peers, local, names)
    assert (found is None) == ok
    if found is not None:
        assert found.code == "imex_no_local_interface"


@pytest.fixture
def tray(node: Callable[..., Path]) -> Path:
    root = node("gb200-tray")
    (root / "etc/nvidia-imex").mkdir(parents=True)
    (root / "etc/nvidia-imex/config.cfg").write_text((IMEX / SHIPPED[0]).read_text())
    return root


def test_d07_node_list_without_this_host_is_refused_before_writing(tray: Path,
                                                                   tmp_path: Path) -> None:
    case = d07()
    peers = tmp_path / "nodes.cfg"
    peers.write_text(dra298_node_list())
    out, rc = run_json("imex", "config", "--root", str(tray), "--peers", str(peers),
                       "--local-address", "192.0.2.77")
    assert check_expect({"codes": case["expect"]["codes"], "exit_code": 1}, out, rc) == []
    assert out["written"] is False
    assert not (tray / "etc/nvidia-imex/nodes_config.cfg").exists()
    assert "192.0.2.77" in out["findings"][0]["hint"]


def test_config_writes_node_list_and_keeps_the_shipped_file_intact(tray: Path) -> None:
    shipped = (tray / "etc/nvidia-imex/config.cfg").read_text()
    out, rc = run_json("imex", "config", "--root", str(tray), "--peer", "198.51.100.1",
                       "--peer", "198.51.100.2", "--local-address", "198.51.100.2")
    assert (rc, out["written"], out["findings"]) == (0, True, [])
    assert (tray / "etc/nvidia-imex/nodes_config.cfg").read_text() == \
        "198.51.100.1\n198.51.100.2\n"
    assert (tray / "etc/nvidia-imex/config.cfg").read_text() == shipped
    assert out["node_list_id"].startswith("sha256:")


def test_config_set_patches_in_place_with_a_backup(tray: Path) -> None:
    cfg = tray / "etc/nvidia-imex/config.cfg"
    shipped = cfg.read_text()
    (tray / "etc/nvidia-imex/nodes_config.cfg").write_text("198.51.100.9\n")
    out, rc = run_json("imex", "config", "--root", str(tray), "--set", "DAEMONIZE=0",
                       "--local-address", "198.51.100.9")
    assert rc == 0
    new = cfg.read_text().splitlines()
    old = shipped.splitlines()
    assert [(a, b) for a, b in zip(old, new, strict=True) if a != b] == [
        ("DAEMONIZE=1", "DAEMONIZE=0")]
    assert (tray / "etc/nvidia-imex/config.cfg.nvfabric.bak").read_text() == shipped


def test_config_slurm_hostlist_finds_this_node_by_host_name(tray: Path) -> None:
    (tray / "etc/hostname").write_text("gb-07\n")
    out, rc = run_json("imex", "config", "--root", str(tray), "--peers-slurm", "gb-[01-18]",
                       "--dry-run", "--local-address", "192.0.2.2")
    assert (rc, out["written"], len(out["node_list"])) == (0, False, 18)
    assert out["files"][0]["content"].startswith("gb-01\ngb-02\n")


def test_config_bad_set_value_is_a_usage_error(tray: Path) -> None:
    out, rc = run_json("imex", "config", "--root", str(tray), "--set", "SERVER_PORT=http",
                       "--peer", "198.51.100.1", "--local-address", "198.51.100.1")
    assert rc == 2
    assert out["error"]["code"] == "config_invalid_value"
    assert out["error"]["key"] == "SERVER_PORT"


@pytest.mark.parametrize(("key", "nearest"), [("SERVER_PORTT", "SERVER_PORT"),
                                              ("log_level", "LOG_LEVEL"), ("FOO", None)])
def test_config_unknown_set_key_is_refused_before_writing(tray: Path, key: str,
                                                          nearest: str | None) -> None:
    cfg = tray / "etc/nvidia-imex/config.cfg"
    before = cfg.read_bytes()
    out, rc = run_json("imex", "config", "--root", str(tray), "--set", f"{key}=1",
                       "--peer", "198.51.100.1", "--local-address", "198.51.100.1")
    assert rc == 2
    assert (out["error"]["code"], out["error"]["key"]) == ("config_invalid_value", key)
    assert "not a key nvidia-imex knows" in out["error"]["message"]
    assert (f"did you mean {nearest}?" in out["error"]["message"]) == (nearest is not None)
    assert cfg.read_bytes() == before


def test_config_set_key_commented_out_in_the_shipped_file_is_known(tray: Path) -> None:
    out, rc = run_json("imex", "config", "--root", str(tray), "--dry-run",
                       "--set", "IMEX_ENABLE_AUTH_ENCRYPTION=0",
                       "--peer", "198.51.100.1", "--local-address", "198.51.100.1")
    assert rc == 0, out


def test_config_two_node_list_sources_is_a_usage_error(tray: Path) -> None:
    out, rc = run_json("imex", "config", "--root", str(tray), "--peer", "198.51.100.1",
                       "--peers-slurm", "gb-[01-02]")
    assert rc == 2


def test_imex_section_for_status_reports_carries_the_node_list(tray: Path) -> None:
    from nvfabric.facts.imex.tray import section
    from nvfabric.rules.imex.nodes import node_list_id

    (tray / "etc/nvidia-imex/nodes_config.cfg").write_text(
        (IMEX / "aws-parallelcluster-nvidia-imex-nodes.erb").read_text())
    out = section(str(tray))
    assert out["node_list"] == ["198.51.100.1", "198.51.100.2"]
    assert out["node_list_id"] == node_list_id(["198.51.100.1", "198.51.100.2"])
    assert (out["owner"], out["channels"]["major"]) == ("none", 234)


def test_imex_section_of_a_malformed_node_list_names_the_error_and_lists_nothing(
        tray: Path) -> None:
    from nvfabric.facts.imex.tray import read_channels, section
    from nvfabric.rules.imex import nodes, owner, report

    (tray / "etc/nvidia-imex/nodes_config.cfg").write_text("198.51.100.1\nnot a host!\n")
    out = section(str(tray))
    assert "not a host!" in out["node_list_error"]
    assert (out["node_list_path"], out["node_list"], out["node_list_id"]) == (None, [], None)
    # the rule itself is pure: the same answer from values, no root
    pure = report.section(owner.decide(owner.OwnerEvidence()), read_channels(str(tray)),
                          nodes.PeerError("entry 2 'not a host!' is not an address"))
    assert pure["node_list_error"].startswith("entry 2") and pure["owner"] == "none"


def test_simulated_node_addresses_come_from_its_proc_net(tmp_path: Path) -> None:
    from nvfabric.facts.imex import tray as host

    (tmp_path / "proc/net").mkdir(parents=True)
    (tmp_path / "proc/net/fib_trie").write_text(
        "Local:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 198.51.100.7\n        /32 host LOCAL\n"
        "     |-- 198.51.100.255\n        /32 link BROADCAST\n")
    (tmp_path / "proc/net/if_inet6").write_text(
        "fe8000000000000000fcfffffe000001 02 40 20 80     eth0\n"
        "00000000000000000000000000000001 01 80 10 80       lo\n")
    assert host.node_addresses(str(tmp_path)) == ("198.51.100.7", "fe80::fc:ffff:fe00:1", "::1")


# Tester report 2: `--nodes-config /../../tester-nc.cfg --output /../../tester-out.cfg` wrote
# outside --root, and so did a node list path set with --set and used by a later run.
@pytest.mark.parametrize("args", [
    ["--nodes-config", "/../../nvf-escape-nc.cfg"],
    ["--output", "/../../nvf-escape-out.cfg"],
    ["--config", "/etc/../../nvf-escape.cfg"],
    ["--set", "IMEX_NODE_CONFIG_FILE=/../../nvf-escape/evil-abs"],
    ["--set", "LOG_FILE_NAME=/var/log/../../../nvf-escape.log"],
    ["--set", "IMEX_CMD_UNIX_DOMAIN_PATH=/run/../../nvf-escape.sock"],
], ids=["nodes-config", "output", "config", "set-node-config-file", "set-log-file",
        "set-unix-socket"])
def test_config_refuses_dot_dot_in_every_path(tray: Path, args: list[str]) -> None:
    path = args[1].split("=", 1)[-1]
    escaped = Path(os.path.normpath(str(tray) + path))  # where the old code wrote
    assert not escaped.is_relative_to(tray)
    out, rc = run_json("imex", "config", "--root", str(tray), "--peer", "198.51.100.1",
                       "--local-address", "198.51.100.1", *args)
    assert rc == 2 and "'..'" in out["error"]["message"]
    assert out["error"]["hint"]
    for above in (tray.parent, tray.parent.parent):
        assert not [p for p in above.iterdir() if p.name.startswith("nvf-escape")]
    assert not (tray / "etc/nvidia-imex/nodes_config.cfg").exists()  # nothing written


def test_config_refuses_a_link_that_leaves_the_root(tray: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tray / "etc/evil").symlink_to(outside)
    out, rc = run_json("imex", "config", "--root", str(tray), "--peer", "198.51.100.1",
                       "--local-address", "198.51.100.1", "--nodes-config", "/etc/evil/n.cfg")
    assert rc == 2 and "outside the root" in out["error"]["message"]
    assert list(outside.iterdir()) == []


def test_config_shipped_node_path_with_dot_dot_is_not_followed(tray: Path) -> None:
    cfg = tray / "etc/nvidia-imex/config.cfg"
    cfg.write_text(cfg.read_text().replace(
        "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg",
        "IMEX_NODE_CONFIG_FILE=/../../nvf-escape/evil-abs"))
    out, rc = run_json("imex", "config", "--root", str(tray), "--peer", "198.51.100.1",
                       "--local-address", "198.51.100.1")
    assert (rc, out["nodes_config"]) == (0, "/etc/nvidia-imex/nodes_config.cfg")
    assert "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg" in cfg.read_text()


# Tester report 10(f): `--set IMEX_NODE_CONFIG_FILE=X` wrote the node list to the old path
# while config.cfg pointed at X.
def test_config_set_node_config_file_writes_the_list_there(tray: Path) -> None:
    out, rc = run_json("imex", "config", "--root", str(tray), "--peer", "198.51.100.1",
                       "--local-address", "198.51.100.1",
                       "--set", "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/other.cfg")
    assert (rc, out["nodes_config"]) == (0, "/etc/nvidia-imex/other.cfg")
    assert (tray / "etc/nvidia-imex/other.cfg").read_text() == "198.51.100.1\n"
    assert not (tray / "etc/nvidia-imex/nodes_config.cfg").exists()
    assert "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/other.cfg" in \
        (tray / "etc/nvidia-imex/config.cfg").read_text()
    # Without a new list, moving the config to another file takes the current list along.
    out, rc = run_json("imex", "config", "--root", str(tray), "--local-address", "198.51.100.1",
                       "--set", "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/third.cfg")
    assert (rc, out["nodes_config"]) == (0, "/etc/nvidia-imex/third.cfg")
    assert (tray / "etc/nvidia-imex/third.cfg").read_text() == "198.51.100.1\n"


def test_config_nodes_config_and_set_disagreeing_is_a_usage_error(tray: Path) -> None:
    out, rc = run_json("imex", "config", "--root", str(tray), "--peer", "198.51.100.1",
                       "--local-address", "198.51.100.1", "--nodes-config", "/etc/a.cfg",
                       "--set", "IMEX_NODE_CONFIG_FILE=/etc/b.cfg")
    assert (rc, out["error"]["key"]) == (2, "IMEX_NODE_CONFIG_FILE")


# Tester report 6: `--peers <binary file>` was an internal error (exit 3).
def test_config_peers_binary_file_is_exit_2_saying_so(tray: Path, tmp_path: Path) -> None:
    peers = tmp_path / "peers.bin"
    peers.write_bytes(b"198.51.100.1\n\xff\xfe\x00\x01")
    out, rc = run_json("imex", "config", "--root", str(tray), "--peers", str(peers))
    assert rc == 2 and "is not a text file" in out["error"]["message"]
    assert "--peers" in out["error"]["message"] and out["error"]["hint"]


# Tester report 14: a refused config said "would write".
def test_config_refused_says_refused_not_would_write(tray: Path) -> None:
    proc = run_cli("imex", "config", "--root", str(tray), "--peer", "198.51.100.99",
                   "--local-address", "198.51.100.1")
    assert proc.returncode == 1
    assert f"refused, not written: {tray}/etc/nvidia-imex/nodes_config.cfg" in proc.stdout
    assert "would write" not in proc.stdout


def test_run_imex_peers_binary_file_is_refused_saying_so(tmp_path: Path) -> None:
    # The same defect as --peers (tester report 6) on `nvfabric run --imex-peers`.
    from tests.runkit import sim

    root = sim(tmp_path, "gb200-tray")
    peers = tmp_path / "peers.bin"
    peers.write_bytes(b"\xff\xfe1\x00")
    out, rc = run_json("run", "--root", str(root), "--imex-peers", str(peers), "--dry-run")
    assert rc == 2  # like `imex config --peers BINARY` (issue 10)
    f = out["error"]
    assert f["code"] == "input_unreadable"
    assert "is not a text file" in f["message"] and f["hint"]


@pytest.mark.parametrize("profile", ["dgx-b200", "hgx-h100", "h100-pcie"])
def test_run_imex_peers_unreadable_is_refused_on_every_fabric(tmp_path: Path,
                                                              profile: str) -> None:
    # Off a GB200/GB300 tray `run --imex-peers /missing` exited 0: the mistyped path of a
    # fleet-wide unit was silently ignored instead of read like `imex config --peers`.
    from tests.runkit import sim

    root = sim(tmp_path, profile)
    out, rc = run_json("run", "--root", str(root), "--imex-peers", str(tmp_path / "missing"),
                       "--dry-run")
    assert rc == 2, out
    assert out["error"]["code"] == "input_unreadable"
    assert "--imex-peers" in out["error"]["message"]


# A FIFO in place of an IMEX config file hung `status`, `run --dry-run` and `imex config`:
# config files are read like sysfs attributes (regular files only, non-blocking open).
@pytest.mark.parametrize("fifo", ["config.cfg", "nodes_config.cfg"])
def test_fifo_in_place_of_an_imex_config_file_does_not_hang(tray: Path, fifo: str) -> None:
    from nvfabric.facts.imex import tray as host

    path = tray / "etc/nvidia-imex" / fifo
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    for args in (["status", "--root", str(tray)], ["run", "--dry-run", "--root", str(tray)],
                 ["imex", "config", "--root", str(tray), "--peer", "198.51.100.1",
                  "--local-address", "198.51.100.1", "--dry-run"]):
        proc = run_cli(*args, "--json", timeout=30)
        assert proc.stdout.startswith("{"), (args, proc.stdout, proc.stderr)
    assert host.read_file(str(tray), f"/etc/nvidia-imex/{fifo}") is None


# A relative IMEX_NODE_CONFIG_FILE in the shipped config.cfg was silently replaced by the
# default path: the rewrite is an info finding naming the old and the new value.
def test_config_relative_node_config_file_rewrite_is_said(tray: Path) -> None:
    cfg = tray / "etc/nvidia-imex/config.cfg"
    cfg.write_text(cfg.read_text().replace(
        "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg",
        "IMEX_NODE_CONFIG_FILE=nodes_config.cfg"))
    args = ("imex", "config", "--root", str(tray), "--peer", "198.51.100.1",
            "--local-address", "198.51.100.1", "--dry-run")
    out, rc = run_json(*args)
    assert (rc, out["nodes_config"]) == (0, "/etc/nvidia-imex/nodes_config.cfg")
    [note] = out["findings"]
    assert (note["code"], note["severity"]) == ("imex_node_config_rewritten", "info")
    assert (note["old"], note["new"]) == ("nodes_config.cfg", "/etc/nvidia-imex/nodes_config.cfg")
    text = run_cli(*args).stdout
    assert "IMEX_NODE_CONFIG_FILE=nodes_config.cfg" in text
    assert "set to /etc/nvidia-imex/nodes_config.cfg" in text
    # Asked for explicitly, a new path is no news.
    out, rc = run_json(*args, "--nodes-config", "/etc/nvidia-imex/other.cfg")
    assert (rc, out["findings"]) == (0, [])


# Wording: "none of the 1 IMEX node list entries".
def test_a_one_entry_list_without_this_host_says_the_only_entry() -> None:
    found = nodes.check_local((nodes.parse_entry("198.51.100.9"),), ("198.51.100.1",), ())
    assert found is not None
    assert found.message.startswith("the only IMEX node list entry is not an address of this")


def test_config_slurm_hostlist_finds_this_node_by_a_resolved_address(tray: Path) -> None:
    # Issue 10: a Slurm host list whose names are not this host's name (etc/hostname is the
    # cloud name) but resolve (etc/hosts) to one of its addresses passes the local check
    # without --skip-local-check, as IMEX itself resolves them.
    (tray / "etc/hostname").write_text("ip-192-0-2-2\n")
    (tray / "etc/hosts").write_text("127.0.0.1 localhost\n192.0.2.1 gb-01\n"
                                    "192.0.2.2 gb-02.cluster gb-02  # this tray\n")
    out, rc = run_json("imex", "config", "--root", str(tray), "--peers-slurm", "gb-[01-04]",
                       "--dry-run", "--local-address", "192.0.2.2")
    assert rc == 0, out
    assert "imex_no_local_interface" not in [f["code"] for f in out["findings"]]
    # the same list on a node none of whose names or addresses it holds is still refused
    out, rc = run_json("imex", "config", "--root", str(tray), "--peers-slurm", "gb-[01-04]",
                       "--dry-run", "--local-address", "192.0.2.9")
    assert rc == 1
    assert "imex_no_local_interface" in [f["code"] for f in out["findings"]]
    # two names resolving to this host: exactly one entry must name it
    (tray / "etc/hosts").write_text("192.0.2.2 gb-01 gb-02\n")
    out, rc = run_json("imex", "config", "--root", str(tray), "--peers-slurm", "gb-[01-04]",
                       "--dry-run", "--local-address", "192.0.2.2")
    assert rc == 1 and "2 IMEX node list entries name this host" in json_messages(out)


def json_messages(out: dict[str, object]) -> str:
    findings = out.get("findings")
    assert isinstance(findings, list)
    return " ".join(str(f["message"]) for f in findings)


def test_hosts_file_parsing() -> None:
    from nvfabric.facts.imex.tray import parse_hosts

    text = "# comment\n10.0.0.1  a.example  A\nfe80::1%eth0 b\n\n10.0.0.2 a\nbad\n"
    assert parse_hosts(text) == {"a.example": ("10.0.0.1",), "a": ("10.0.0.1", "10.0.0.2"),
                                 "b": ("fe80::1",)}


def test_written_files_are_shown_under_the_root(tmp_path: Path) -> None:
    """Issue 10: printed paths show the root they were made under (`run` lists its files so);
    `imex config --root R` said `wrote /etc/nvidia-imex/nodes_config.cfg` of R's file."""
    from tests.cli.test_run_mnnvl import tray

    root = tray(tmp_path)
    made = root / "etc/nvidia-imex/nodes_config.cfg"
    out, rc = run_json("imex", "config", "--root", str(root), "--peer", "192.0.2.10",
                       "--peer", "192.0.2.11")
    assert rc == 0, out
    assert [f["path"] for f in out["files"]] == [str(made)]
    assert out["nodes_config"] == "/etc/nvidia-imex/nodes_config.cfg"  # the value, host view
    assert made.read_text() == "192.0.2.10\n192.0.2.11\n"
    proc = run_cli("imex", "config", "--root", str(root), "--peer", "192.0.2.10", "--dry-run")
    assert f"would write {made}" in proc.stdout


@pytest.mark.parametrize("value", ["/var/log/nvidia-imex.log ", " /var/log/nvidia-imex.log"])
def test_config_set_value_with_blanks_at_an_end_is_refused_not_trimmed(
        tray: Path, value: str) -> None:
    """``--set KEY='V '`` was written as ``KEY=V`` without a word (README "Config values":
    refused when it starts or ends with blanks)."""
    out, rc = run_json("imex", "config", "--root", str(tray), "--set", f"LOG_FILE_NAME={value}",
                       "--peer", "198.51.100.1", "--local-address", "198.51.100.1", "--dry-run")
    assert rc == 2
    assert out["error"]["code"] == "config_invalid_value"
    assert out["error"]["key"] == "LOG_FILE_NAME"
    assert "start or end with blanks" in out["error"]["message"]
