"""A fresh Debian bookworm root made by the real ``mmdebstrap``, built once per machine.

The integration tests (package install, container base image, IMEX image flow) each need a
Debian root of their own. Building one takes minutes, so the tarball is built once,
``mmdebstrap --variant=apt --include=python3 bookworm``, cached under ``build/cache/`` of the
checkout (ignored by git), and each test unpacks a private copy. A lock file serialises
concurrent builders; the tarball is written to a temporary name and renamed, so a half-built
one is never used.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / "build" / "cache"
TARBALL = CACHE / "bookworm-apt-python3.tar"
MIRROR = "http://deb.debian.org/debian"


def require(*tools: str) -> None:
    """Fail (never skip) with one line naming each missing tool; .ci/run installs them all."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise AssertionError(
            f"integration test needs {', '.join(missing)} (installed by .ci/run: "
            "apt-get install them)")


def bookworm_tarball(include: tuple[str, ...] = ("python3",)) -> Path:
    """Path of the cached bookworm root tarball (apt variant plus the packages ``include``,
    python3 by default), built if missing; one tarball per package set.

    Raises AssertionError naming mmdebstrap when it is not installed, and
    ``subprocess.CalledProcessError`` when the build fails.
    """
    require("mmdebstrap")
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = TARBALL if include == ("python3",) else CACHE / (
        "-".join(("bookworm-apt", *include)) + ".tar")
    with open(CACHE / "bookworm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if tarball.is_file():
            return tarball
        tmp = tarball.with_suffix(f".tmp{os.getpid()}.tar")
        subprocess.run(
            ["mmdebstrap", "--quiet", "--variant=apt",
             *([f"--include={','.join(include)}"] if include else []),
             "bookworm", str(tmp), MIRROR],
            check=True, timeout=1200,
        )
        os.replace(tmp, tarball)
    return tarball


def fresh_root(dest: Path, include: tuple[str, ...] = ("python3",)) -> Path:
    """Unpack a private copy of the bookworm root (apt variant plus ``include``) into
    ``dest`` (created) and return it."""
    tarball = bookworm_tarball(include)
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-xf", str(tarball), "-C", str(dest)], check=True, timeout=600)
    return dest


def arm64_glibc_root(dest: Path) -> Path:
    """Debian bookworm's arm64 glibc, libgcc and zlib packages unpacked into ``dest`` (created),
    as ``mmdebstrap --arch=arm64 --variant=extract`` lays them out: the glibc root of an
    aarch64 Talos extension built on this x86_64 machine (extract runs no program of the
    packages, so no emulator is needed). The tarball is cached like the bookworm root's."""
    require("mmdebstrap")
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = CACHE / "bookworm-arm64-glibc.tar"
    with open(CACHE / "bookworm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not tarball.is_file():
            tmp = tarball.with_suffix(f".tmp{os.getpid()}.tar")
            subprocess.run(
                ["mmdebstrap", "--quiet", "--arch=arm64", "--variant=extract",
                 "--include=libc6,libgcc-s1,zlib1g", "bookworm", str(tmp), MIRROR],
                check=True, timeout=1200)
            os.replace(tmp, tarball)
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-xf", str(tarball), "-C", str(dest)], check=True, timeout=600)
    return dest
