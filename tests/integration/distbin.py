"""The PyInstaller builds, the single-file binary ``dist/nvfabric`` and the directory build
``dist/nvfabric-dir/``, and the Debian package built from the directory build, for the
integration tests (``make dist``, ``make dist-dir``, ``make deb``), and the binary and the
package as systemd installations (:class:`tests.integration.usermanager.Install`).

make rebuilds only when a source changed; a lock file serialises test processes that ask at
once. Building needs PyPI (PyInstaller, into build/dist-venv) the first time.
"""

from __future__ import annotations

import fcntl
import subprocess
from pathlib import Path

import nvfabric
from tests.integration.debroot import CACHE, REPO, require
from tests.integration.usermanager import UNIT, Install

BINARY = REPO / "dist" / "nvfabric"
#: The directory build's executable (beside its _internal/).
ONEDIR = REPO / "dist" / "nvfabric-dir" / "nvfabric"


def _make(target: str) -> None:
    """``make -s TARGET`` under the lock; AssertionError with the end of make's output when
    it fails."""
    require("make")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "dist.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(["make", "-s", target], cwd=REPO, check=False, timeout=900,
                              capture_output=True, text=True)
    if done.returncode:
        raise AssertionError(f"make {target} failed ({done.returncode}):\n"
                             + (done.stdout + done.stderr)[-3000:])


def dist_binary() -> Path:
    """Path of an up-to-date ``dist/nvfabric`` (``make dist``)."""
    _make("dist")
    assert BINARY.is_file(), f"make dist did not write {BINARY}"
    return BINARY


def dist_dir() -> Path:
    """Path of the executable of an up-to-date ``dist/nvfabric-dir/`` (``make dist-dir``)."""
    _make("dist-dir")
    assert ONEDIR.is_file(), f"make dist-dir did not write {ONEDIR}"
    return ONEDIR


def deb_package() -> Path:
    """Path of ``dist/nvfabric_<version>_<arch>.deb`` from an up-to-date directory build
    (``make deb``)."""
    require("dpkg", "dpkg-deb")
    _make("deb")
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


def deb_files(dest: Path) -> Path:
    """The Debian package's files as dpkg lays them out, unpacked into ``dest``
    (``dpkg-deb -x``); returns ``dest``."""
    subprocess.run(["dpkg-deb", "-x", str(deb_package()), str(dest)], check=True, timeout=120)
    return dest


def deb_install(tmp_path: Path) -> Install:
    """The Debian package's files as dpkg lays them out: its /usr/bin/nvfabric (the link to
    the directory build) and its unit, exactly as shipped (no drop-in)."""
    unpacked = deb_files(tmp_path / "deb")
    units = unpacked / "lib/systemd/system"
    assert not (units / f"{UNIT}.d").exists()
    return Install("deb", unpacked / "usr/bin/nvfabric", units / UNIT)
