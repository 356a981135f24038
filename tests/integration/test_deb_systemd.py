"""The Debian package's unit and drop-in with its single-file binary under a real systemd
(the user manager of tests/integration/usermanager.py): `systemctl start` returns after the
binary's READY=1 because the package's drop-in sets NotifyAccess=all; without it systemd
drops the notification (it comes from the bootloader's child) and the start times out."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.debroot import REPO
from tests.integration.distbin import dist_binary
from tests.integration.usermanager import UNIT, UserManager

DROPIN = REPO / "packaging/debian/single-file-binary.conf"


@pytest.fixture
def manager() -> Iterator[UserManager]:
    m = UserManager()
    try:
        m.start()
        yield m
    finally:
        m.stop()


def install(m: UserManager, tmp_path: Path, package_dropin: bool, extra: str = "",
            unit: Path = REPO / "packaging/systemd" / UNIT) -> Path:
    """``unit`` (default: the package's) and, if asked, the package's drop-in in the manager,
    ExecStart pointed at the binary on a DGX B200 the binary simulated; returns the root."""
    binary = dist_binary()
    root = tmp_path / "node"
    done = subprocess.run([str(binary), "simulate", "dgx-b200", str(root)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    shutil.copyfile(unit, m.units / UNIT)
    d = m.units / f"{UNIT}.d"
    d.mkdir()
    if package_dropin:
        shutil.copyfile(DROPIN, d / DROPIN.name)
    log = tmp_path / "nvfabric.log"
    (d / "zz-test.conf").write_text(
        "[Service]\nExecStart=\n"
        f"ExecStart={binary} run --root {root}\n"
        f"StandardOutput=append:{log}\nStandardError=append:{log}\n" + extra)
    m.systemctl("daemon-reload")
    return root


def test_start_returns_after_the_binarys_ready_with_the_packages_dropin(
        manager: UserManager, tmp_path: Path) -> None:
    root = install(manager, tmp_path, package_dropin=True)
    t0 = time.monotonic()
    manager.systemctl("start", UNIT)
    took = time.monotonic() - t0
    props = manager.show(UNIT, "ActiveState", "SubState", "NotifyAccess", "MainPID")
    assert props["ActiveState"] == "active" and props["NotifyAccess"] == "all", props
    assert (root / "run/nvfabric/ready").is_file()  # written just before READY=1
    main = int(props["MainPID"])
    assert main in manager.unit_pids(UNIT)
    assert took < 60
    manager.systemctl("stop", UNIT)
    assert manager.show(UNIT, "ActiveState")["ActiveState"] == "inactive"
    assert manager.unit_pids(UNIT) == []  # fabric manager and NVLSM (fakes) gone too


def test_without_the_dropin_systemd_drops_ready_from_the_child_and_the_start_times_out(
        manager: UserManager, tmp_path: Path) -> None:
    install(manager, tmp_path, package_dropin=False, extra="TimeoutStartSec=8s\n")
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
    install(manager, tmp_path, package_dropin=False, extra="TimeoutStartSec=30s\n",
            unit=written)
    manager.systemctl("start", UNIT)
    props = manager.show(UNIT, "ActiveState", "NotifyAccess")
    assert props == {"ActiveState": "active", "NotifyAccess": "all"}, props
    manager.systemctl("stop", UNIT)
