"""Symbolic links under a root are resolved as the node resolves them (facts/fs.py,
model/hostpath.py): the DaemonSet mounts the host at /host and reads it with --root /host, and
a node tree captured from a real node is read the same way. On the node an absolute link
target starts at the node's /, which is the root; ``..`` stops there; 40 links at most. What
the reader's own kernel would find outside the root is never read: a link to /etc/shadow is
<root>/etc/shadow or nothing. Writes and programs stay strict (hostpath.confined/program)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nvfabric.facts import fs
from nvfabric.facts import slurm as slurm_facts
from nvfabric.facts.imex import tray as imex_facts
from nvfabric.model import hostpath
from nvfabric.rules.imex.owner import decide
from tests.conftest import run_json
from tests.facts.imex.test_tray import OWN_DAEMON_PROLOG, link, put

#: Each case: links and files to make under the root ("L path target" / "F path text"), the
#: host path read, and what it reads (None: as missing).
CASES = {
    # Debian's slurm-wlm keeps its configuration in /etc/slurm-llnl, linked from /etc/slurm
    "slurm.conf, an absolute link": (
        ["F etc/slurm-llnl/slurm.conf SwitchType=switch/nvidia_imex",
         "L etc/slurm/slurm.conf /etc/slurm-llnl/slurm.conf"],
        "/etc/slurm/slurm.conf", "SwitchType=switch/nvidia_imex"),
    "slurm.conf, a directory linked absolutely": (
        ["F etc/slurm-llnl/slurm.conf ClusterName=gb200", "L etc/slurm /etc/slurm-llnl"],
        "/etc/slurm/slurm.conf", "ClusterName=gb200"),
    # update-alternatives(1): /usr/bin/x -> /etc/alternatives/x -> the chosen one
    "an alternatives chain": (
        ["F usr/lib/nvidia/580/nvidia-smi smi-580",
         "L usr/lib/nvidia/current 580",
         "L etc/alternatives/nvidia-smi /usr/lib/nvidia/current/nvidia-smi",
         "L usr/bin/nvidia-smi /etc/alternatives/nvidia-smi"],
        "/usr/bin/nvidia-smi", "smi-580"),
    "a relative link that climbs past the root stops at it": (
        ["F etc/hostname gb200-tray-07", "L etc/nvidia-imex/host ../../../../../../etc/hostname"],
        "/etc/nvidia-imex/host", "gb200-tray-07"),
    "an absolute target with '..' stops at the root": (
        ["F etc/hostname gb200-tray-07", "L run/host /../../../etc/./hostname"],
        "/run/host", "gb200-tray-07"),
    "'..' after an absolute directory link is the target's parent": (
        ["F etc/slurm-llnl/../hostname gb200-tray-07", "L opt/slurm /etc/slurm-llnl",
         "F etc/slurm-llnl/slurm.conf x", "L etc/h /opt/slurm/../hostname"],
        "/etc/h", "gb200-tray-07"),
    "the root's /etc/shadow, never the reader's": (
        ["F etc/shadow root:*:19000:0:99999:7:::", "L etc/nvidia-imex/pw /etc/shadow"],
        "/etc/nvidia-imex/pw", "root:*:19000:0:99999:7:::"),
    "no /etc/shadow in the root: nothing, though the reader has one": (
        ["L etc/nvidia-imex/pw /etc/shadow"], "/etc/nvidia-imex/pw", None),
    "a loop of absolute links": (
        ["L etc/a /etc/b", "L etc/b /etc/a"], "/etc/a", None),
    "a dangling absolute link": (["L etc/a /etc/none"], "/etc/a", None),
    "40 links are followed": (
        ["F etc/l40 end"] + [f"L etc/l{i} /etc/l{i + 1}" for i in range(40)], "/etc/l0", "end"),
    "41 are a loop (ELOOP)": (
        ["F etc/l41 end"] + [f"L etc/l{i} /etc/l{i + 1}" for i in range(41)], "/etc/l0", None),
}


def make(root: Path, items: list[str]) -> None:
    for item in items:
        kind, path, value = item.split(" ", 2)
        if kind == "F":
            put(root, os.path.normpath(path), value + "\n", 0o644)
        else:
            link(root, path, value)


@pytest.mark.parametrize("case", list(CASES))
def test_a_link_reads_what_the_node_reads(tmp_path: Path, case: str) -> None:
    items, path, expected = CASES[case]
    root = tmp_path / "host"
    make(root, items)
    full = hostpath.under(str(root), path)
    assert fs.read_text(full) == expected
    assert fs.is_file(full) is (expected is not None)


def test_the_readers_file_of_the_same_name_is_never_read(tmp_path: Path) -> None:
    """A link naming a file the reader has (outside the root): the root's file or nothing."""
    outside = tmp_path / "elsewhere" / "secret"
    outside.parent.mkdir()
    outside.write_text("the reader's own\n")
    root = tmp_path / "host"
    link(root, "etc/a", str(outside))
    link(root, "etc/d", str(outside.parent))
    full = hostpath.under(str(root), "/etc/a")
    assert (fs.read_text(full), fs.read_bytes(full), fs.is_file(full)) == (None, None, False)
    assert fs.listdir(hostpath.under(str(root), "/etc/d")) == []
    put(root, str(outside).lstrip("/"), "the node's\n")
    assert fs.read_text(full) == "the node's"
    assert fs.listdir(hostpath.under(str(root), "/etc/d")) == ["secret"]


def test_links_into_the_root_by_its_own_path_still_resolve(tmp_path: Path) -> None:
    root = tmp_path / "host"
    put(root, "etc/nvidia-imex/config.cfg", "SERVER_PORT=50000\n", 0o644)
    link(root, "etc/imex", str(root / "etc/nvidia-imex"))  # a copied tree's absolute link
    link(root, "etc/alt", "/etc/imex")  # ... reached through a node-absolute one
    for path in ("/etc/imex/config.cfg", "/etc/alt/config.cfg"):
        assert fs.read_text(hostpath.under(str(root), path)) == "SERVER_PORT=50000"


def test_listing_glob_and_link_names_follow_the_node(tmp_path: Path) -> None:
    root = tmp_path / "host"
    put(root, "etc/slurm-llnl/prolog.d/10-site.sh", "#!/bin/sh\n")
    put(root, "etc/slurm-llnl/prolog.d/.hidden", "#!/bin/sh\n")
    link(root, "etc/slurm-llnl/prolog.d/50-imex", "/usr/local/sbin/imex-prolog")
    link(root, "etc/slurm", "/etc/slurm-llnl")
    base = hostpath.under(str(root), "/etc/slurm/prolog.d")
    assert fs.listdir(base) == [".hidden", "10-site.sh", "50-imex"]
    assert fs.glob(base + "/*") == [base + "/10-site.sh", base + "/50-imex"]  # dangling kept
    assert fs.glob(base + "/.h*") == [base + "/.hidden"]
    assert fs.link_name(base + "/50-imex") == "imex-prolog"
    assert fs.is_dir(base) and not fs.is_file(base + "/50-imex")
    assert fs.lexists(base + "/50-imex") and not fs.lexists(base + "/none")
    assert fs.glob("/nonexistent-nvfabric-test/*") == []  # --root /: glob.glob itself


def test_in_root_resolves_component_by_component(tmp_path: Path) -> None:
    root = tmp_path / "host"
    link(root, "etc/slurm", "/etc/slurm-llnl")
    link(root, "a", "b/../../../../c")
    under = hostpath.register(str(root))  # as under() does
    assert hostpath.in_root(f"{under}/etc/slurm/new.conf") == f"{under}/etc/slurm-llnl/new.conf"
    assert hostpath.in_root(f"{under}/a/x") == f"{under}/c/x"  # '..' stopped at the root
    assert hostpath.in_root("/not/under/a/root") == "/not/under/a/root"
    link(root, "loop", "/loop")
    with pytest.raises(OSError, match="Too many levels"):
        hostpath.in_root(f"{under}/loop/x")


def test_writes_stay_strict_and_say_where_the_node_would_resolve(tmp_path: Path) -> None:
    """A path nvfabric writes or hands to a daemon is resolved by its own kernel after the
    check: an absolute link out of the root is refused, naming the node's file."""
    root = tmp_path / "host"
    (root / "etc/nvidia-imex-real").mkdir(parents=True)
    link(root, "etc/nvidia-imex", "/etc/nvidia-imex-real")
    with pytest.raises(hostpath.PathEscape) as err:
        hostpath.confined(str(root), "/etc/nvidia-imex/nodes_config.cfg", "IMEX node list")
    assert str(err.value) == (
        "IMEX node list '/etc/nvidia-imex/nodes_config.cfg' resolves to "
        f"/etc/nvidia-imex-real/nodes_config.cfg, outside the root {root}; the node resolves "
        "it to /etc/nvidia-imex-real/nodes_config.cfg, but nvfabric's own kernel (and a "
        "daemon's) would follow it out of the root: give that path")
    assert hostpath.confined(str(root), "/etc/nvidia-imex-real/nodes_config.cfg") == \
        str(root / "etc/nvidia-imex-real/nodes_config.cfg")
    put(root, "usr/lib/nvidia/nvidia-smi", "#!/bin/sh\n")
    link(root, "usr/bin/nvidia-smi", "/usr/lib/nvidia/nvidia-smi")
    with pytest.raises(hostpath.PathEscape, match="the node resolves it to "
                                                  "/usr/lib/nvidia/nvidia-smi"):
        hostpath.program(hostpath.under(str(root), "/usr/bin/nvidia-smi"))


# -- end to end: the IMEX owner of a DaemonSet's /host whose Slurm config is linked ----------

def debian_slurm(root: Path) -> None:
    """Debian's slurm-wlm layout: /etc/slurm/slurm.conf an absolute link to /etc/slurm-llnl,
    the prolog in a prolog.d reached through an absolute directory link, the script itself
    chosen through /etc/alternatives."""
    put(root, "etc/slurm-llnl/slurm.conf",
        "SlurmctldHost=ctl\nProlog=/etc/slurm/prolog.d/*\n", 0o644)
    link(root, "etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf")
    link(root, "etc/slurm/prolog.d", "/etc/slurm-llnl/prolog.d")
    put(root, "usr/local/lib/slurm/imex-prolog", OWN_DAEMON_PROLOG)
    link(root, "etc/alternatives/imex-prolog", "/usr/local/lib/slurm/imex-prolog")
    link(root, "etc/slurm-llnl/prolog.d/50-imex", "/etc/alternatives/imex-prolog")


def test_slurm_conf_through_an_absolute_link_decides_the_imex_owner(
        node: Callable[..., Path]) -> None:
    tray = node("gb200-tray")
    debian_slurm(tray)
    facts = slurm_facts.read(str(tray))
    assert (facts.conf, facts.notes, facts.unread) == ("/etc/slurm/slurm.conf", (), ())
    (script,) = facts.scripts
    assert script.chain[-1] == ("/etc/slurm/prolog.d/50-imex -> "
                                "/usr/local/lib/slurm/imex-prolog")
    assert decide(imex_facts.gather_evidence(str(tray))).owner == "slurm"
    out, rc = run_json("imex", "owner", "--root", str(tray))
    assert (out["owner"], out["runner"], rc) == ("slurm", "prolog", 0)
    assert out["slurm_conf"]["path"] == "/etc/slurm/slurm.conf"
