"""``make deb``: the package installs with the real dpkg into a fresh Debian bookworm root
(mmdebstrap, with systemd and without Python), its unit verifies there with systemd-analyze,
the binary runs inside the root, nothing is enabled or started, and lintian is clean."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

import nvfabric
from tests import runkit
from tests.integration.debroot import REPO, fresh_root, require
from tests.integration.distbin import deb_package, dist_binary

UNIT = REPO / "packaging/systemd/nvfabric.service"
#: The target system: systemd (so init-system-helpers, deb-systemd-helper) and no Python.
ROOT_PACKAGES = ("systemd",)
DROPIN = "/lib/systemd/system/nvfabric.service.d/single-file-binary.conf"
WANTS_LINK = "etc/systemd/system/multi-user.target.wants/nvfabric.service"


def sh(*argv: str, env: dict[str, str] | None = None,
       timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return runkit.run(list(argv), timeout=timeout, env=env)


@pytest.fixture(scope="module")
def deb() -> Path:
    require("dpkg", "dpkg-deb", "lintian", "systemd-analyze", "chroot")
    return deb_package()


def field(deb: Path, name: str) -> str:
    return sh("dpkg-deb", "--field", str(deb), name).stdout.strip()


def test_control_fields_and_depends_on_no_python(deb: Path) -> None:
    assert field(deb, "Package") == "nvfabric"
    assert field(deb, "Version") == nvfabric.__version__
    depends = [d.strip() for d in field(deb, "Depends").split(",")]
    assert not any("python" in d for d in depends), depends
    names = [re.match(r"[a-z0-9.+-]+", d).group(0) for d in depends]  # type: ignore[union-attr]
    assert names[0] == "libc6" and set(names) <= {"libc6", "zlib1g"}, depends
    # The glibc floor is the highest GLIBC_ version any ELF in the package references: the
    # bootloader itself at least.
    floor = re.fullmatch(r"libc6 \(>= ([0-9.]+)\)", depends[0])
    assert floor, depends[0]
    boot = set(re.findall(r"GLIBC_([0-9.]+)", sh("objdump", "-T", str(dist_binary())).stdout))
    assert boot and all(sh("dpkg", "--compare-versions", floor.group(1), "ge", v).returncode == 0
                        for v in boot)


def test_files_are_root_owned_with_the_right_modes(deb: Path) -> None:
    listing = sh("dpkg-deb", "--contents", str(deb)).stdout.splitlines()
    entries = {line.split()[-1].lstrip("."): line.split()[:2] for line in listing}
    assert {owner for _, owner in entries.values()} == {"root/root"}
    assert entries["/usr/bin/nvfabric"][0] == "-rwxr-xr-x"
    assert entries["/lib/systemd/system/nvfabric.service"][0] == "-rw-r--r--"
    assert {"/usr/share/doc/nvfabric/copyright", "/usr/share/doc/nvfabric/changelog.gz",
            "/usr/share/man/man1/nvfabric.1.gz", DROPIN} <= set(entries)
    control = sh("dpkg-deb", "--info", str(deb)).stdout
    for script in ("postinst", "prerm", "postrm"):
        assert re.search(rf"\*\s+{script}\s+#!/bin/sh", control), control


def test_lintian_is_clean_with_info_and_pedantic_tags(deb: Path) -> None:
    out = sh("lintian", "--info", "--pedantic", "--fail-on", "error,warning,info,pedantic",
             str(deb))
    tags = [ln for ln in out.stdout.splitlines() if re.match(r"^[EWIPX]: ", ln)]
    assert out.returncode == 0 and tags == [], out.stdout + out.stderr
    # Every override is used (an unused one would be an info tag above) and has a reason.
    overrides = (REPO / "packaging/debian/lintian-overrides").read_text().split("\n\n")
    for block in overrides[1:]:
        lines = block.strip().splitlines()
        assert lines[0].startswith("# ") and lines[-1].startswith("nvfabric: "), block


def test_dpkg_installs_into_a_fresh_bookworm_root_without_starting_anything(
        deb: Path, tmp_path: Path) -> None:
    root = fresh_root(tmp_path / "root", ROOT_PACKAGES)
    assert not (root / "usr/bin/python3").exists()  # the binary must not need one
    done = sh("dpkg", "--root", str(root), "--install", str(deb))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not enabled and not started" in done.stdout
    status = sh("dpkg", "--root", str(root), "--status", "nvfabric").stdout
    assert "Status: install ok installed" in status
    binary = root / "usr/bin/nvfabric"
    assert binary.read_bytes() == dist_binary().read_bytes()
    assert stat.S_IMODE(binary.stat().st_mode) == 0o755 and binary.stat().st_uid == 0
    unit = root / "lib/systemd/system/nvfabric.service"
    assert unit.read_bytes() == UNIT.read_bytes()
    # The package's drop-in, NotifyAccess=all (test_dist.py says why); systemd-analyze verify
    # below reads it too (an unknown key in it would be on verify's stderr).
    dropin = (root / DROPIN.lstrip("/")).read_text()
    assert dropin.rstrip().endswith("[Service]\nNotifyAccess=all"), dropin
    # Recorded for purge (deb-systemd-helper update-state), neither enabled nor started.
    assert not (root / WANTS_LINK).exists()
    assert (root / "var/lib/systemd/deb-systemd-helper-enabled/nvfabric.service.dsh-also"
            ).is_file()
    # The unit verifies against the root's systemd; its man: reference finds the page the
    # package installed (MANPATH points man into the root).
    verify = sh("systemd-analyze", "verify", f"--root={root}", "nvfabric.service",
                env={**os.environ, "MANPATH": str(root / "usr/share/man")})
    assert verify.returncode == 0 and verify.stderr == "", verify.stderr
    # The binary runs inside the root (no Python there), the whole CLI with it.
    version = sh("chroot", str(root), "nvfabric", "--version")
    assert version.stdout.strip() == f"nvfabric, version {nvfabric.__version__}", version.stderr
    plan = sh("chroot", str(root), "sh", "-c",
              "nvfabric simulate dgx-b200 /tmp/b200 >/dev/null && "
              "nvfabric plan --root /tmp/b200 --json")
    assert plan.returncode == 0 and '"fabric": "nvlink5"' in plan.stdout, plan.stderr


def test_an_upgrade_keeps_the_admins_enablement_and_purge_removes_it(
        deb: Path, tmp_path: Path) -> None:
    root = fresh_root(tmp_path / "root", ROOT_PACKAGES)
    assert sh("dpkg", "--root", str(root), "--install", str(deb)).returncode == 0
    enable = sh("systemctl", f"--root={root}", "enable", "nvfabric.service")
    assert enable.returncode == 0, enable.stderr
    assert (root / WANTS_LINK).is_symlink()
    again = sh("dpkg", "--root", str(root), "--install", str(deb))  # reinstall = upgrade path
    assert again.returncode == 0, again.stdout + again.stderr
    assert (root / WANTS_LINK).is_symlink()
    assert "not enabled and not started" not in again.stdout  # said on first install only
    purge = sh("dpkg", "--root", str(root), "--purge", "nvfabric")
    assert purge.returncode == 0, purge.stdout + purge.stderr
    assert not (root / WANTS_LINK).exists() and not (root / WANTS_LINK).is_symlink()
    assert not (root / "usr/bin/nvfabric").exists()
    assert not (root / "lib/systemd/system/nvfabric.service").exists()
    assert "nvfabric" not in sh("dpkg", "--root", str(root), "--list").stdout
