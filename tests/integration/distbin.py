"""The single-file binary ``dist/nvfabric`` and the Debian package built from it, for the
integration tests (``make dist``, ``make deb``), and both as a systemd installation
(:class:`tests.integration.usermanager.Install`).

``make dist`` rebuilds only when a source changed; a lock file serialises test processes that
ask at once. Building needs PyPI (PyInstaller, into build/dist-venv) the first time.
"""

from __future__ import annotations

import fcntl
import subprocess
from pathlib import Path

import nvfabric
from tests.integration.debroot import CACHE, REPO, require
from tests.integration.usermanager import UNIT, Install

BINARY = REPO / "dist" / "nvfabric"


def dist_binary() -> Path:
    """Path of an up-to-date ``dist/nvfabric``; AssertionError with the end of make's output
    when the build fails."""
    require("make")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "dist.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(["make", "-s", "dist"], cwd=REPO, check=False, timeout=900,
                              capture_output=True, text=True)
    if done.returncode:
        raise AssertionError(f"make dist failed ({done.returncode}):\n"
                             + (done.stdout + done.stderr)[-3000:])
    assert BINARY.is_file(), f"make dist did not write {BINARY}"
    return BINARY


def deb_package() -> Path:
    """Path of ``dist/nvfabric_<version>_<arch>.deb`` from an up-to-date binary (``make deb``);
    AssertionError with the end of make's output when the build fails."""
    require("dpkg", "dpkg-deb")
    dist_binary()
    with open(CACHE / "dist.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(["make", "-s", "deb"], cwd=REPO, check=False, timeout=900,
                              capture_output=True, text=True)
    if done.returncode:
        raise AssertionError(f"make deb failed ({done.returncode}):\n"
                             + (done.stdout + done.stderr)[-3000:])
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()
    path = REPO / "dist" / f"nvfabric_{nvfabric.__version__}_{arch}.deb"
    assert path.is_file(), f"make deb wrote no {path.name}"
    return path


def binary_install(tmp_path: Path) -> Install:
    """The single-file binary as ``dist/nvfabric unit install`` installs it: the unit it
    writes (NotifyAccess=all) and ExecStart on the binary."""
    binary = dist_binary()
    staging = tmp_path / "staging-binary"
    staging.mkdir()
    done = subprocess.run([str(binary), "unit", "install", "--root", str(staging)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return Install("binary", binary, staging / "etc/systemd/system" / UNIT)


def deb_install(tmp_path: Path) -> Install:
    """The Debian package's files as dpkg lays them out (``dpkg-deb -x``): its
    /usr/bin/nvfabric, its unit and its drop-in, exactly as shipped."""
    unpacked = tmp_path / "deb"
    subprocess.run(["dpkg-deb", "-x", str(deb_package()), str(unpacked)], check=True,
                   timeout=120)
    units = unpacked / "lib/systemd/system"
    return Install("deb", unpacked / "usr/bin/nvfabric", units / UNIT,
                   tuple(sorted((units / f"{UNIT}.d").glob("*.conf"))))
