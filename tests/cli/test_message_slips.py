"""Ten message slips found by trying the CLI as an operator would, each with the command that
showed it; every one is the example of a kind, fixed as a kind:

1. ``imex domain --from-file BINARY``: the hint of a node list ("one address or host name per
   line") for a file that should hold ``nvidia-imex-ctl -N`` output (each text-file option
   says what its file holds).
2. ``wait --timeout 3`` with a hung nvidia-smi: "did not answer within 2.99997 s" (a bound
   computed from a deadline; every duration goes through ``model.words.seconds``, and wait's
   probe bound is whole tenths).
3. ``status --root TREE`` of a tree without ``bin/nvidia-smi``: "read from nvml", though NVML
   was not read (nothing was: "not read (nvidia-smi-xml tried)").
4. ``unit install`` / ``imex channel --create`` as root on a read-only filesystem: "run as root"
   (the errno decides the hint; "run as root" only to a process that is not root).
5. ``run --help``: six options without help (``--fm-bin``, ``--nvlsm-bin``,
   ``--nvlsm-config``, ``--nvlsm-pid-file``, ``--imex-bin``, ``--imex-ctl``).
6. The same kind of timeout with unequal ranges: ``run --imex-ctl-timeout`` 0.05-120 s,
   ``imex domain --timeout`` 0.1-600 s (both bound each nvidia-imex-ctl call): one range,
   ``rules.imex.tables.CTL_TIMEOUT_RANGE_S``.
7. ``status --prometheus --json``: ``input_unreadable`` with an empty hint (every usage error
   now needs a hint: ``simulate nosuch DIR`` had none either).
8. ``domain check BINARY``: "bad JSON" at line 8 of a binary file (it is not a text file).
9. ``install --from DIR`` whose cached .deb is not an ar archive: exit 3, internal_error
   "ArError: Unable to find global header" (it is input_unreadable, exit 2).
10. ``fetch --driver-version 1.2``: taken for a driver version and asked of the network four
    times (a driver version is NNN.N[NN][.N[NN]], as the module prints it).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from nvfabric.cli import COMMANDS
from nvfabric.effects.imex import mknod_hint
from nvfabric.model.errors import os_hint
from nvfabric.model.words import seconds
from nvfabric.simulate.fakes import set_faults
from tests.conftest import run_cli, run_json
from tests.runkit import sim

BINARY = "/bin/ls"


def test_1_a_binary_imex_domain_file_gets_the_hint_of_an_imex_ctl_capture(
        tmp_path: Path) -> None:
    proc = run_cli("imex", "domain", "--from-file", BINARY)
    assert proc.returncode == 2
    assert "is not a text file" in proc.stderr
    assert "nvidia-imex-ctl -N" in proc.stderr and "host name per line" not in proc.stderr
    # the node list options keep theirs
    peers = run_cli("run", "--root", str(sim(tmp_path, "gb200-tray")), "--imex-peers", BINARY,
                    "--dry-run")
    assert peers.returncode == 2 and "one address or host name per line" in peers.stderr


def test_2_a_bound_from_a_deadline_is_said_in_plain_seconds(tmp_path: Path) -> None:
    assert [seconds(x) for x in (2.99997, 0.25, 300.0, 0.2501)] == ["3", "0.25", "300", "0.25"]
    root = sim(tmp_path, "dgx-b200")
    set_faults(str(root), {"nvidia-smi": {"hang": True}})
    out, rc = run_json("wait", "--root", str(root), "--timeout", "3", timeout=60)
    assert rc == 1, out
    [f] = [f for f in out["findings"] if f["code"] == "nvml_unavailable"]
    bound = f["message"].split("within ", 1)[1].split(" s", 1)[0]
    assert len(bound.partition(".")[2]) <= 1, f["message"]  # 2.9, never 2.99997


def test_3_nothing_read_is_not_read_from_nvml(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    (root / "bin/nvidia-smi").unlink()
    proc = run_cli("status", "--root", str(root))
    first = proc.stdout.splitlines()[0]
    assert "not read (nvidia-smi-xml tried)" in first and "read from nvml" not in first
    out, _ = run_json("status", "--root", str(root))
    assert out["source"] == "nvidia-smi-xml"


def test_4_run_as_root_is_said_only_to_a_process_that_is_not_root() -> None:
    ro = OSError(errno.EROFS, "Read-only file system")
    assert "read-only filesystem" in os_hint(ro, "/etc/systemd/system", euid=0)
    denied = OSError(errno.EACCES, "Permission denied")
    assert "run as root" in os_hint(denied, "/x", euid=1000)
    assert "run as root" not in os_hint(denied, "/x", euid=0)
    assert "runs as root already" in os_hint(denied, "/x", euid=0)
    eperm = OSError(errno.EPERM, "Operation not permitted")
    assert "run as root" in mknod_hint(eperm, euid=1000)
    assert "run as root" not in mknod_hint(eperm, euid=0) and "CAP_MKNOD" in mknod_hint(eperm, 0)
    assert "read-only" in mknod_hint(ro, euid=0)


READ_ONLY_UNIT = r"""
set -e
mount --bind "$1" "$1"
mount -o remount,bind,ro "$1"
shift
exec "$@"
"""


def test_4_unit_install_as_root_on_a_read_only_tree_names_the_read_only_filesystem(
        tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.fail("this test makes a read-only bind mount: it needs root and unshare "
                    "(util-linux), as the CI machine has")
    root = tmp_path / "image"
    (root / "etc/systemd/system").mkdir(parents=True)
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", READ_ONLY_UNIT, "sh",
         str(root), sys.executable, "-m", "nvfabric", "unit", "install", "--root", str(root),
         "--json"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, (done.stdout, done.stderr)
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "unit_not_installed"
    assert "read-only filesystem" in error["hint"] and "run as root" not in error["hint"]


def _commands() -> list[tuple[str, click.Command]]:
    out = []
    for name, load in COMMANDS.items():
        stack: list[tuple[str, click.Command]] = [(name, load())]
        while stack:
            path, cmd = stack.pop()
            if isinstance(cmd, click.Group):
                stack += [(f"{path} {n}", sub) for n, sub in cmd.commands.items()]
            else:
                out.append((path, cmd))
    return out


def test_5_every_option_of_every_command_has_help() -> None:
    missing = [(path, p.opts[0]) for path, cmd in _commands() for p in cmd.params
               if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip()]
    assert missing == []
    assert "Fabric manager's binary" in run_cli("run", "--help").stdout


def test_6_one_kind_of_timeout_has_one_range() -> None:
    def option(path: str, name: str) -> click.Option:
        [cmd] = [c for p, c in _commands() if p == path]
        [opt] = [p for p in cmd.params if isinstance(p, click.Option) and name in p.opts]
        return opt

    ctl = [option("run", "--imex-ctl-timeout").type, option("imex domain", "--timeout").type]
    assert len({(t.min, t.max) for t in ctl}) == 1  # type: ignore[attr-defined]
    assert ctl[0].min == 0.05 and ctl[0].max == 600  # type: ignore[attr-defined]


@pytest.mark.parametrize("args", [
    ("status", "--prometheus", "--json"),
    ("simulate", "nosuch-profile", "/tmp/nvfabric-never-written"),
])
def test_7_a_usage_error_always_has_a_hint(args: tuple[str, ...]) -> None:
    out, rc = run_json(*args)
    assert rc == 2 and out["error"]["code"] == "input_unreadable"
    assert out["error"]["hint"].strip(), out


def test_7_the_unknown_profile_hint_names_the_list() -> None:
    out, _ = run_json("simulate", "nosuch-profile", "/tmp/nvfabric-never-written")
    assert "simulate --list" in out["error"]["hint"]
    assert not os.path.exists("/tmp/nvfabric-never-written")


def test_8_a_binary_domain_report_is_not_a_text_file() -> None:
    out, rc = run_json("domain", "check", BINARY)
    assert rc == 2
    assert "is not a text file" in out["error"]["message"]
    assert "bad JSON" not in out["error"]["message"]


def test_9_a_cached_deb_that_is_not_an_ar_archive_is_unreadable_not_a_bug(
        tmp_path: Path) -> None:
    from nvfabric.artifacts import cachefile
    from tests.artifacts.test_debinstall import NVML, dpkg_tree, put
    from tests.cli.test_fetch_mirror import sha256
    from tests.cli.test_install_from import cache_deb

    root = sim(tmp_path, "gb200-tray")
    dpkg_tree(root, {"libc6": ["/usr/lib/aarch64-linux-gnu/libc.so.6"]})
    put(root, NVML)
    put(root, "/usr/bin/nvidia-modprobe")
    path = cache_deb(tmp_path / "debs")
    data = b"not a Debian package at all"
    path.write_bytes(data)
    record = json.loads((tmp_path / "debs" / cachefile.RECORD).read_text())
    record["artifacts"][0]["sha256"] = sha256(data)
    (tmp_path / "debs" / cachefile.RECORD).write_text(json.dumps(record))
    out, rc = run_json("install", "--from", str(tmp_path / "debs"), "--root", str(root),
                       "--dry-run")
    assert rc == 2, out
    assert out["error"]["code"] == "input_unreadable"
    assert "not a readable Debian package" in out["error"]["message"]


@pytest.mark.parametrize("version", ["1.2", "2025.06.6", "5800.95.05"])
def test_10_a_driver_version_is_checked_before_the_network(version: str) -> None:
    out, rc = run_json("fetch", "--driver-version", version, "--fabric", "nvswitch",
                       "--dry-run", "--retries", "0", timeout=30)
    assert rc == 2, out
    assert out["error"]["code"] == "input_unreadable"
    assert "is not a driver version like 580.95.05" in out["error"]["message"]
