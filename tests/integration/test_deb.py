"""``make deb``: the package installs with the real dpkg into a fresh Debian bookworm root
(mmdebstrap, with systemd and without Python), its units (nvfabric.service and the textfile
timer and service) verify there with systemd-analyze, the directory build runs inside the
root through /usr/bin/nvfabric, nothing is enabled or started, and lintian is clean."""

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
from tests.integration.distbin import deb_files, deb_package, dist_dir

UNITS = REPO / "packaging/systemd"
UNIT_NAMES = ("nvfabric.service", "nvfabric-textfile.service", "nvfabric-textfile.timer")
#: The target system: systemd (so init-system-helpers, deb-systemd-helper) and no Python.
ROOT_PACKAGES = ("systemd",)
WANTS_LINK = "etc/systemd/system/multi-user.target.wants/nvfabric.service"
TIMER_LINK = "etc/systemd/system/timers.target.wants/nvfabric-textfile.timer"
LIBDIR = "usr/lib/nvfabric"


def sh(*argv: str, env: dict[str, str] | None = None,
       timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return runkit.run(list(argv), timeout=timeout, env=env)


@pytest.fixture(scope="module")
def deb() -> Path:
    require("dpkg", "dpkg-deb", "lintian", "systemd-analyze", "chroot", "objdump")
    return deb_package()


@pytest.fixture(scope="module")
def installed(deb: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A fresh bookworm root with the package installed by dpkg; (root, dpkg's stdout)."""
    root = fresh_root(tmp_path_factory.mktemp("installed") / "root", ROOT_PACKAGES)
    assert not (root / "usr/bin/python3").exists()  # the build must not need one
    done = sh("dpkg", "--root", str(root), "--install", str(deb))
    assert done.returncode == 0, done.stdout + done.stderr
    return root, done.stdout


def field(deb: Path, name: str) -> str:
    return sh("dpkg-deb", "--field", str(deb), name).stdout.strip()


def depends(deb: Path) -> dict[str, str | None]:
    """Depends as {package: minimum version or None}."""
    out: dict[str, str | None] = {}
    for rel in field(deb, "Depends").split(","):
        m = re.fullmatch(r"\s*([a-z0-9][a-z0-9.+-]*)(?: \(>= ([^)]+)\))?\s*", rel)
        assert m, rel
        out[m[1]] = m[2]
    return out


def elf_files(top: Path) -> list[Path]:
    return [p for p in top.rglob("*") if p.is_file() and not p.is_symlink()
            and p.read_bytes()[:4] == b"\x7fELF"]


def test_control_fields_and_depends_on_no_python(deb: Path, tmp_path: Path) -> None:
    assert field(deb, "Package") == "nvfabric"
    assert field(deb, "Version") == nvfabric.__version__
    deps = depends(deb)
    assert "libc6" in deps and not any("python" in d for d in deps), deps
    # The glibc floor covers the highest GLIBC_ version any ELF object in the package
    # references (objdump, independent of dpkg-shlibdeps' symbols files).
    files = deb_files(tmp_path / "files")
    referenced = {v for obj in elf_files(files / LIBDIR)
                  for v in re.findall(r"\bGLIBC_([0-9]+(?:\.[0-9]+)+)\b",
                                      sh("objdump", "-T", str(obj)).stdout)}
    assert referenced and all(
        sh("dpkg", "--compare-versions", str(deps["libc6"]), "ge", v).returncode == 0
        for v in referenced), (deps["libc6"], sorted(referenced))


def test_the_hosts_libraries_are_depended_on_and_the_interpreter_is_bundled(
        deb: Path, tmp_path: Path) -> None:
    # PyInstaller copied the build host's libraries into _internal/; the package leaves out
    # every copy that is byte-equal to an installed Debian package's library and depends on
    # that package instead; the interpreter stays (no Python dependency).
    built = dist_dir().parent / "_internal"
    shipped = deb_files(tmp_path / "files") / LIBDIR / "_internal"
    deps = depends(deb)
    left_out = sorted(p.name for p in built.iterdir()
                      if p.is_file() and not (shipped / p.name).exists())
    assert left_out, "no host library left out: nothing to depend on?"
    for name in left_out:
        owners = sh("dpkg-query", "-S", f"*/{name}").stdout
        assert any(line.split(":", 1)[0] in deps for line in owners.splitlines()), (name, owners)
    assert "libssl.so.3" in left_out and "libssl3" in deps  # security updates from Debian
    assert any(p.name.startswith("libpython3") for p in shipped.iterdir())
    # Every library an ELF object of the package needs is in _internal/ or on the host.
    for obj in elf_files(shipped.parent):
        for lib in re.findall(r"^\s*NEEDED\s+(\S+)$", sh("objdump", "-p", str(obj)).stdout,
                              re.MULTILINE):
            assert (shipped / lib).exists() or sh("dpkg-query", "-S", f"*/{lib}").returncode \
                == 0, (obj, lib)


def test_files_are_root_owned_with_the_right_modes(deb: Path) -> None:
    entries = {}
    for line in sh("dpkg-deb", "--contents", str(deb)).stdout.splitlines():
        mode, owner, _size, _date, _time, path, *link = line.split()
        entries[path.lstrip(".")] = (mode, owner, link[1] if link else None)
    assert {owner for _, owner, _ in entries.values()} == {"root/root"}
    assert entries["/usr/bin/nvfabric"][::2] == ("lrwxrwxrwx", "../lib/nvfabric/nvfabric")
    assert entries[f"/{LIBDIR}/nvfabric"][0] == "-rwxr-xr-x"
    libs = [p for p in entries if p.startswith(f"/{LIBDIR}/_internal/") and ".so" in p]
    assert libs and all(entries[p][0] == "-rw-r--r--" for p in libs)  # mapped, not executed
    for unit in UNIT_NAMES:
        assert entries[f"/lib/systemd/system/{unit}"][0] == "-rw-r--r--"
    # the one-dir build is one process: no NotifyAccess drop-in
    assert not any(p.startswith("/lib/systemd/system/nvfabric.service.d") for p in entries)
    assert {"/usr/share/doc/nvfabric/copyright", "/usr/share/doc/nvfabric/changelog.gz",
            "/usr/share/man/man1/nvfabric.1.gz"} <= set(entries)
    control = sh("dpkg-deb", "--info", str(deb)).stdout
    for script in ("postinst", "prerm", "postrm"):
        assert re.search(rf"\*\s+{script}\s+#!/bin/sh", control), control


def test_lintian_is_clean_with_info_and_pedantic_tags(deb: Path) -> None:
    out = sh("lintian", "--info", "--pedantic", "--fail-on", "error,warning,info,pedantic",
             str(deb))
    tags = [ln for ln in out.stdout.splitlines() if re.match(r"^[EWIPX]: ", ln)]
    assert out.returncode == 0 and tags == [], out.stdout + out.stderr
    # Every override has a reason and silences a hint (lintian 2.116 says nothing of an
    # override that matches nothing; --show-overrides lists what each one silenced).
    shown = sh("lintian", "--pedantic", "--show-overrides", str(deb)).stdout
    silenced = {m[1] for m in re.finditer(r"^O: nvfabric: (\S+) ", shown, re.MULTILINE)}
    overrides = (REPO / "packaging/debian/lintian-overrides").read_text().split("\n\n")
    for block in overrides[1:]:
        lines = block.strip().splitlines()
        assert lines[0].startswith("# ") and lines[-1].startswith("nvfabric: "), block
        assert lines[-1].split()[1] in silenced, (lines[-1], sorted(silenced))


def test_dpkg_installs_into_a_fresh_bookworm_root_without_starting_anything(
        installed: tuple[Path, str]) -> None:
    root, stdout = installed
    assert "nvfabric.service installed, not enabled and not started" in stdout
    status = sh("dpkg", "--root", str(root), "--status", "nvfabric").stdout
    assert "Status: install ok installed" in status
    link = root / "usr/bin/nvfabric"
    assert os.readlink(link) == "../lib/nvfabric/nvfabric"
    exe = root / LIBDIR / "nvfabric"
    assert exe.read_bytes() == dist_dir().read_bytes()
    assert stat.S_IMODE(exe.stat().st_mode) == 0o755 and exe.stat().st_uid == 0
    unit = root / "lib/systemd/system/nvfabric.service"
    assert unit.read_bytes() == (UNITS / "nvfabric.service").read_bytes()
    assert "\nNotifyAccess=main\n" in unit.read_text()  # as shipped: one process
    assert not (root / "lib/systemd/system/nvfabric.service.d").exists()
    # Recorded for purge (deb-systemd-helper update-state), neither enabled nor started.
    assert not (root / WANTS_LINK).exists()
    assert (root / "var/lib/systemd/deb-systemd-helper-enabled/nvfabric.service.dsh-also"
            ).is_file()
    # The unit verifies against the root's systemd; its man: reference finds the page the
    # package installed (MANPATH points man into the root).
    verify = sh("systemd-analyze", "verify", f"--root={root}", "nvfabric.service",
                env={**os.environ, "MANPATH": str(root / "usr/share/man")})
    assert verify.returncode == 0 and verify.stderr == "", verify.stderr
    # The build runs inside the root (no Python there), the whole CLI with it.
    version = sh("chroot", str(root), "nvfabric", "--version")
    assert version.stdout.strip() == f"nvfabric, version {nvfabric.__version__}", version.stderr
    plan = sh("chroot", str(root), "sh", "-c",
              "nvfabric simulate dgx-b200 /tmp/b200 >/dev/null && "
              "nvfabric plan --root /tmp/b200 --json")
    assert plan.returncode == 0 and '"fabric": "nvlink5"' in plan.stdout, plan.stderr


def test_the_package_carries_the_textfile_timer_and_service_installed_not_enabled(
        installed: tuple[Path, str]) -> None:
    root, stdout = installed
    units = root / "lib/systemd/system"
    for name in ("nvfabric-textfile.service", "nvfabric-textfile.timer"):
        assert (units / name).read_bytes() == (UNITS / name).read_bytes(), name
    assert "nvfabric-textfile.timer" in stdout and "installed, not enabled" in stdout
    assert not (root / TIMER_LINK).exists()
    assert (root / "var/lib/systemd/deb-systemd-helper-enabled/nvfabric-textfile.timer.dsh-also"
            ).is_file()
    # As installed: the timer, the service it starts and the command that service runs
    # (/usr/bin/nvfabric, the package's link) verify against the root's systemd.
    verify = sh("systemd-analyze", "verify", f"--root={root}", "nvfabric-textfile.timer",
                "nvfabric-textfile.service",
                env={**os.environ, "MANPATH": str(root / "usr/share/man")})
    assert verify.returncode == 0 and verify.stderr == "", verify.stderr
    # What the service runs, inside the root, on a simulated node (whose root the textfile
    # path is under, as every host path of nvfabric is): the reading in the file, exit 1 for
    # a fabric not up yet (the service's SuccessExitStatus=1).
    textfile = sh("chroot", str(root), "sh", "-c",
                  "nvfabric simulate dgx-b200 /tmp/b200-textfile >/dev/null && "
                  "mkdir -p /tmp/b200-textfile/var/lib/node_exporter/textfile_collector && "
                  "nvfabric status --root /tmp/b200-textfile --textfile "
                  "/var/lib/node_exporter/textfile_collector/nvfabric.prom")
    assert textfile.returncode == 1, textfile.stderr
    prom = root / "tmp/b200-textfile/var/lib/node_exporter/textfile_collector/nvfabric.prom"
    assert "nvfabric_" in prom.read_text()


def test_an_upgrade_keeps_the_admins_enablement_and_purge_removes_it(
        deb: Path, tmp_path: Path) -> None:
    root = fresh_root(tmp_path / "root", ROOT_PACKAGES)
    assert sh("dpkg", "--root", str(root), "--install", str(deb)).returncode == 0
    for unit in ("nvfabric.service", "nvfabric-textfile.timer"):
        enable = sh("systemctl", f"--root={root}", "enable", unit)
        assert enable.returncode == 0, enable.stderr
    assert (root / WANTS_LINK).is_symlink() and (root / TIMER_LINK).is_symlink()
    again = sh("dpkg", "--root", str(root), "--install", str(deb))  # reinstall = upgrade path
    assert again.returncode == 0, again.stdout + again.stderr
    assert (root / WANTS_LINK).is_symlink() and (root / TIMER_LINK).is_symlink()
    assert "not enabled" not in again.stdout  # said on first install only
    purge = sh("dpkg", "--root", str(root), "--purge", "nvfabric")
    assert purge.returncode == 0, purge.stdout + purge.stderr
    for link in (WANTS_LINK, TIMER_LINK):
        assert not (root / link).exists() and not (root / link).is_symlink(), link
    assert not (root / "usr/bin/nvfabric").is_symlink()
    assert not (root / LIBDIR).exists()
    assert not (root / "lib/systemd/system/nvfabric.service").exists()
    assert not (root / "lib/systemd/system/nvfabric-textfile.timer").exists()
    assert "nvfabric" not in sh("dpkg", "--root", str(root), "--list").stdout
