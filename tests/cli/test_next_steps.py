"""The commands nvfabric prints for the operator to type (a next step, the fix in a hint) do,
typed as printed, what the command that printed them meant: on the same root, with the same
state directory, config and download directory (nvfabric.model.commandline). Each case names
the command that prints one; the first is the field report: ``fetch --root DIR`` printed
``nvfabric install --from ...`` without ``--root``, which installed into the host's
/opt/nvfabric."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from nvfabric.app.lock import already_running
from nvfabric.artifacts import debinstall
from nvfabric.bringup import mnnvl
from nvfabric.model.commandline import command_line
from nvfabric.rules.imex import channels
from nvfabric.rules.nodefacts import RunningService
from nvfabric.rules.preflight import service_running
from tests.artifacts.test_debinstall import NVML, dpkg_tree, put
from tests.cli.test_fetch_mirror import Mirror, deb_stanza, mirror  # noqa: F401 - fixture
from tests.cli.test_install_from import make_deb
from tests.conftest import run_cli, run_json


def test_command_line_quotes_for_the_shell_and_keeps_placeholders() -> None:
    assert command_line("status") == "nvfabric status"
    assert command_line("status", root="/srv/img 2") == "nvfabric status --root '/srv/img 2'"
    assert command_line("run", root="/", state_dir="/run/nvfabric") == "nvfabric run"
    assert command_line("run", root="/r", state_dir="/run/x") == (
        "nvfabric run --root /r --state-dir /run/x")
    assert command_line("imex", "config", options=(("--config", None), ("--peers", "FILE"))
                        ) == "nvfabric imex config --peers FILE"
    # systemctl's and dpkg's --root come before the action
    assert command_line("-s", "PACKAGE", root="/r", program="dpkg") == "dpkg --root /r -s PACKAGE"


def test_fetch_into_a_root_prints_the_install_that_installs_into_that_root(
    mirror: Mirror, node: Callable[..., Path], tmp_path: Path  # noqa: F811
) -> None:
    root = node("gb200-tray")
    dpkg_tree(root, {"libc6": ["/usr/lib/aarch64-linux-gnu/libc.so.6"]})
    put(root, NVML)
    put(root, "/usr/bin/nvidia-modprobe")
    version = "580.126.20-1ubuntu1"
    deb = make_deb(f"Package: nvidia-imex\nVersion: {version}\nArchitecture: arm64\n"
                   "Maintainer: t <t@example.invalid>\nDepends: nvidia-modprobe\n"
                   "Description: IMEX\n", ("/usr/bin/nvidia-imex",))
    mirror.add(f"nvidia-imex_{version}_arm64.deb", deb)
    mirror.add("Packages", deb_stanza("nvidia-imex", version, deb, "arm64").encode())
    dest = tmp_path / "cache dir"
    args = ("fetch", "--root", str(root), "--source", "apt", "--mirror", mirror.url,
            "--components", "imex", "--arch", "aarch64", "--dest", str(dest), "--retries", "0")
    out, rc = run_json(*args)
    assert rc == 0, out
    line = out["next"]
    assert line == (f"nvfabric install --from {shlex.quote(str(dest))} --root {root} "
                    "--arch aarch64")
    text = run_cli(*args)
    assert f"offline install (at boot, e.g. on a runfile-driver image): {line}" in text.stdout
    # typed as printed (a dry run here), it installs into the root, not into the host
    argv = shlex.split(line)
    assert argv[0] == "nvfabric"
    done, rc = run_json(*argv[1:], "--dry-run")
    assert rc == 0, done
    assert done["commands"][0][:3] == ["dpkg", "--root", str(root)]


def test_the_run_lock_and_ready_hints_name_the_root_and_state_dir(
        node: Callable[..., Path]) -> None:
    assert "`nvfabric status --root /srv/node` shows" in already_running(7, "/l", "/srv/node").hint
    assert "`nvfabric status` shows" in already_running(7, "/l").hint
    root = node("dgx-b200")
    out, rc = run_json("ready", "--root", str(root), "--state-dir", "/run/other")
    assert rc == 1
    assert f"start `nvfabric run --root {root} --state-dir /run/other`" in (
        out["findings"][0]["hint"])


def test_the_preflight_names_the_root_in_its_status_command() -> None:
    running = (RunningService("fabricmanager", 42, "/usr/bin/nv-fabricmanager"),)
    [finding] = service_running(running, ("fabricmanager",), "/host")
    assert "`nvfabric status --root /host` shows it" in finding.hint


def test_the_channel_fix_creates_the_channel_under_the_root() -> None:
    assert "`nvfabric imex channel --root /host --create 3`" in channels.fixes(3, 234, "/host")
    facts = channels.ChannelFacts(234, root="/host")
    [finding] = channels.check(facts)
    assert "`nvfabric imex channel --root /host --create 0`" in finding.hint


def test_the_missing_node_list_hint_writes_it_where_run_reads_it(tmp_path: Path) -> None:
    from nvfabric.bringup.mnnvl import ImexPaths
    from nvfabric.rules.imex.owner import OwnerEvidence
    from nvfabric.rules.nodefacts import ImexFacts

    imex = ImexFacts(OwnerEvidence(), channels.ChannelFacts(234),
                     node_list_path="/etc/x/nodes.cfg", node_list_text=None,
                     node_list_why="does not exist")
    opts = mnnvl.ImexRunOptions(root="/host", paths=ImexPaths(shipped_config="/etc/x/imex.cfg"))
    _, _, finding = mnnvl._node_list(imex, opts)
    assert finding is not None
    assert ("`nvfabric imex config --root /host --config /etc/x/imex.cfg --peers FILE`"
            in finding.hint)


@pytest.mark.parametrize("root", ["/", "/srv/image"])
def test_the_dpkg_and_systemctl_fixes_of_install_from_name_the_root(root: str) -> None:
    failed = debinstall._failed(root, ["dpkg"], "exit status 1", "", [], ["nvidia-imex"])
    where = "" if root == "/" else f" --root {root}"
    assert f"`dpkg{where} --audit`" in failed.finding.message
    assert f"`dpkg{where} -s PACKAGE`" in failed.finding.hint
