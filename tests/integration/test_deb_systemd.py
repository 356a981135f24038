"""The Debian package's unit with its directory build under a real systemd (the user manager
of tests/integration/usermanager.py), and why the single-file binary needs another
NotifyAccess=: the package's build is one process (its bootloader runs Python in its own
process, and ``nvfabric run`` execs into the lean supervisor, same pid), so READY=1 comes from
the main pid and the unit as shipped (``NotifyAccess=main``) starts; the single-file binary's
READY=1 comes from the bootloader's child, which that unit drops (the start times out), so the
unit its ``unit install`` writes has ``NotifyAccess=all``."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.debroot import REPO
from tests.integration.distbin import deb_files, dist_binary
from tests.integration.usermanager import UNIT, UserManager

SHIPPED = REPO / "packaging/systemd" / UNIT


@pytest.fixture
def manager() -> Iterator[UserManager]:
    m = UserManager()
    try:
        m.start()
        yield m
    finally:
        m.stop()


def install(m: UserManager, tmp_path: Path, program: Path, extra: str = "",
            unit: Path = SHIPPED) -> Path:
    """``unit`` (default: the one packaging/systemd ships, which the package installs) in the
    manager, ExecStart pointed at ``program`` on a DGX B200 that ``program`` simulated;
    returns the root."""
    root = tmp_path / "node"
    done = subprocess.run([str(program), "simulate", "dgx-b200", str(root)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    shutil.copyfile(unit, m.units / UNIT)
    d = m.units / f"{UNIT}.d"
    d.mkdir()
    log = tmp_path / "nvfabric.log"
    (d / "zz-test.conf").write_text(
        "[Service]\nExecStart=\n"
        f"ExecStart={program} run --root {root}\n"
        f"StandardOutput=append:{log}\nStandardError=append:{log}\n" + extra)
    m.systemctl("daemon-reload")
    return root


def test_the_packages_build_starts_with_the_unit_as_shipped_and_is_its_main_pid(
        manager: UserManager, tmp_path: Path) -> None:
    files = deb_files(tmp_path / "deb")
    assert (files / "lib/systemd/system" / UNIT).read_bytes() == SHIPPED.read_bytes()
    assert not (files / "lib/systemd/system" / f"{UNIT}.d").exists()
    root = install(manager, tmp_path, files / "usr/bin/nvfabric")
    t0 = time.monotonic()
    manager.systemctl("start", UNIT)
    took = time.monotonic() - t0
    props = manager.show(UNIT, "ActiveState", "SubState", "NotifyAccess", "MainPID")
    assert props["ActiveState"] == "active" and props["NotifyAccess"] == "main", props
    # The supervisor that wrote the ready file (just before READY=1) is the main pid: the
    # same process from ExecStart through the exec into the lean supervisor.
    ready = json.loads((root / "run/nvfabric/ready").read_text())
    assert ready["pid"] == int(props["MainPID"]), (ready, props)
    cmdline = Path(f"/proc/{ready['pid']}/cmdline").read_bytes().split(b"\0")
    assert cmdline[1] == b"--supervise-fd", cmdline
    assert took < 60
    manager.systemctl("stop", UNIT)
    assert manager.show(UNIT, "ActiveState")["ActiveState"] == "inactive"
    assert manager.unit_pids(UNIT) == []  # fabric manager and NVLSM (fakes) gone too


def test_the_single_file_binary_with_the_unit_as_shipped_times_out_ready_is_dropped(
        manager: UserManager, tmp_path: Path) -> None:
    install(manager, tmp_path, dist_binary(), extra="TimeoutStartSec=8s\n")
    done = manager.systemctl("start", UNIT, check=False)
    assert done.returncode != 0
    props = manager.show(UNIT, "Result", "NotifyAccess")
    assert props == {"Result": "timeout", "NotifyAccess": "main"}, props
    # nvfabric did get ready and sent READY=1 (its log says so): systemd ignored it.
    assert "fabric ready in" in (tmp_path / "nvfabric.log").read_text(errors="replace")


def test_the_unit_the_binarys_unit_install_writes_starts_without_any_dropin(
        manager: UserManager, tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    done = subprocess.run([str(dist_binary()), "unit", "install", "--root", str(staging)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    written = staging / "etc/systemd/system" / UNIT
    assert "\nNotifyAccess=all\n" in written.read_text()
    install(manager, tmp_path, dist_binary(), extra="TimeoutStartSec=30s\n", unit=written)
    manager.systemctl("start", UNIT)
    props = manager.show(UNIT, "ActiveState", "NotifyAccess")
    assert props == {"ActiveState": "active", "NotifyAccess": "all"}, props
    manager.systemctl("stop", UNIT)
