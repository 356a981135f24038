"""Build ``nvfabric_<version>_<arch>.deb`` from the directory build and the systemd units.

Run by ``make deb`` with the build venv's Python (python-debian is installed there):

    build_deb.py --dist dist/nvfabric-dir --units packaging/systemd --out dist

The package holds

- ``/usr/lib/nvfabric/``: the directory build (``make dist-dir``, PyInstaller one-dir: the
  executable ``nvfabric`` beside ``_internal/``), a program's private files under
  ``/usr/lib/<package>`` (Debian Policy 9.1.1, FHS "/usr/lib"); ``/usr/bin/nvfabric`` is a
  relative link to it (Policy 10.5: links within one top-level directory are relative). A link,
  not a launcher script: the bootloader finds ``_internal/`` from its real path
  (``/proc/self/exe``) and runs Python in its own process, so the unit's main pid is nvfabric
  itself (``NotifyAccess=main`` and the watchdog hold as shipped) and nothing sits between
  ``exec`` in the Slurm prolog and the run.
- ``/lib/systemd/system/``: ``nvfabric.service`` and ``nvfabric-textfile.{service,timer}``
  (node_exporter's textfile collector), exactly as in ``packaging/systemd``;
- the man page, ``copyright`` (generated: nvfabric and every component the build bundles,
  with the license each declares), ``changelog.gz`` (a native package) and the lintian
  overrides, plus the maintainer scripts of this directory (they never start or enable a
  unit).

Convenience copies (Policy 4.13): PyInstaller copies the build host's shared libraries that
the interpreter's modules load (OpenSSL, zlib, xz, bzip2, libffi, libuuid) into
``_internal/``. A copy whose bytes equal the file the host's dynamic linker resolves
(``ldconfig -p``), owned by an installed Debian package other than a Python one, is left out
and that package becomes a dependency, so the host's security updates reach it (the
bootloader puts ``_internal/`` first on ``LD_LIBRARY_PATH``; a name not found there comes
from the system). The interpreter (``libpython3.X``) and anything not byte-equal to a Debian
package's file stays bundled.

``Depends`` is computed, never written by hand and never on Python: ``dpkg-shlibdeps`` over
every ELF object of the package (the bootloader and everything in ``_internal/``, the
bundled ones resolved in ``_internal/``, ``-l``) with the symbols files of the installed
packages; the build fails if it names a Python package or cannot resolve a library.

The package is assembled in a temporary directory, built with ``dpkg-deb --root-owner-group``
and renamed into place.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.metadata as metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from debian.changelog import Changelog
from debian.deb822 import Deb822
from packaging.requirements import Requirement

HERE = Path(__file__).resolve().parent
PACKAGE = "nvfabric"
MAINTAINER = "nvfabric maintainers <maintainers@users.noreply.a-seed-772cf4a6.example>"
#: Where the directory build goes, and the link to its executable.
LIBDIR = f"usr/lib/{PACKAGE}"
BUNDLE = f"{LIBDIR}/_internal"
LINK = f"usr/bin/{PACKAGE}"
UNIT_DIR = "lib/systemd/system"
#: The units of packaging/systemd the package carries (the maintainer scripts name them too).
UNITS = ("nvfabric.service", "nvfabric-textfile.service", "nvfabric-textfile.timer")
#: ELF e_machine -> Debian architecture (ELF spec, "e_machine"; dpkg's cputable).
ELF_ARCH = {62: "amd64", 183: "arm64"}
VERSION_RX = re.compile(r"^[0-9][A-Za-z0-9.+~]*(-[A-Za-z0-9.+~]+)?$")
#: A line of ``ldconfig -p``: ``\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1``.
LDCONFIG_RX = re.compile(r"^\s+(\S+) \(([^)]*)\) => (\S+)$", re.MULTILINE)
#: ``ldconfig -p``'s flags of this architecture's libraries (glibc's ldconfig.c).
LDCONFIG_FLAGS = {"amd64": "libc6,x86-64", "arm64": "libc6,AArch64"}


class BuildError(Exception):
    """The package cannot be built as asked; the message says why."""


def run(argv: list[str], cwd: Path | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=cwd)
    if done.returncode:
        raise BuildError(f"{argv[0]} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def binary_version(binary: Path) -> str:
    """The version the build reports (``nvfabric, version X``), checked as a Debian version."""
    out = run([str(binary), "--version"]).strip()
    prefix = "nvfabric, version "
    if not out.startswith(prefix) or not VERSION_RX.match(out[len(prefix):]):
        raise BuildError(f"{binary} --version printed {out!r}, not 'nvfabric, version X'")
    return out[len(prefix):]


def elf_machine(data: bytes) -> int | None:
    """e_machine of an ELF image (little-endian only, as on amd64/arm64); None if not ELF."""
    if len(data) < 20 or data[:4] != b"\x7fELF" or data[5] != 1:
        return None
    return int.from_bytes(data[18:20], "little")


def is_elf(path: Path) -> bool:
    with open(path, "rb") as f:
        return elf_machine(f.read(20)) is not None


def system_libraries(arch: str) -> dict[str, str]:
    """soname -> path the host's dynamic linker resolves it to (``ldconfig -p``, this
    architecture's entries only, the first of each name: the one ld.so takes)."""
    flags = LDCONFIG_FLAGS[arch]
    out: dict[str, str] = {}
    for name, info, path in LDCONFIG_RX.findall(run(["ldconfig", "-p"])):
        if info == flags:
            out.setdefault(name, path)
    return out


def owner(path: str) -> str | None:
    """The installed package that holds ``path`` (``dpkg-query -S``), trying the other
    spelling of a merged-/usr path (``/lib/X`` is ``/usr/lib/X``: dpkg knows one of them);
    None when no package does."""
    spellings = [path]
    if path.startswith("/usr/lib/"):
        spellings.append(path[len("/usr"):])
    elif path.startswith("/lib/"):
        spellings.append("/usr" + path)
    for spelling in spellings:
        done = subprocess.run(["dpkg-query", "-S", spelling], capture_output=True, text=True,
                              check=False)
        if done.returncode == 0:
            return done.stdout.split(":", 1)[0].strip()
    return None


def system_copies(bundle: Path, arch: str) -> dict[str, str]:
    """The shared libraries at the top of ``bundle`` (``_internal/``) that are copies of the
    host's: file name -> the Debian package holding the byte-equal file the dynamic linker
    resolves that name to. Python's own packages never count (the interpreter stays
    bundled)."""
    system = system_libraries(arch)
    out = {}
    for lib in sorted(bundle.iterdir()):
        if not lib.is_file() or ".so" not in lib.name or lib.name not in system:
            continue
        host = Path(system[lib.name])
        if not host.is_file() or host.read_bytes() != lib.read_bytes():
            continue
        pkg = owner(str(host))
        if pkg is not None and "python" not in pkg:
            out[lib.name] = pkg
    return out


def shlibs_depends(workdir: Path, elves: list[str], private: str) -> list[str]:
    """``dpkg-shlibdeps`` on ``elves`` (paths relative to ``workdir``, under
    ``debian/nvfabric/``), run in ``workdir`` with the bundled libraries' directory
    ``private`` searched first: the relations of its ``shlibs:Depends``."""
    (workdir / "debian").mkdir(exist_ok=True)
    (workdir / "debian/control").write_text(
        f"Source: {PACKAGE}\n\nPackage: {PACKAGE}\nArchitecture: any\n", encoding="utf-8")
    argv = ["dpkg-shlibdeps", "-O", "--warnings=0", f"-l{private}", *(f"-e{e}" for e in elves)]
    done = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, check=False)
    if done.returncode:
        raise BuildError(f"dpkg-shlibdeps failed: {done.stderr.strip()}")
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("shlibs:Depends=")),
                None)
    if line is None:
        raise BuildError(f"dpkg-shlibdeps printed no shlibs:Depends: {done.stdout!r}")
    return [d.strip() for d in line.partition("=")[2].split(",") if d.strip()]


def runtime_closure(name: str) -> list[metadata.Distribution]:
    """``name`` and every distribution it requires at run time on this interpreter (markers
    evaluated, no extras), from the venv."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [name]
    while todo:
        key = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if key in seen:
            continue
        dist = metadata.distribution(key)
        seen[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return sorted(seen.values(), key=lambda d: d.metadata["Name"].lower())


def license_of(dist: metadata.Distribution) -> str:
    md = dist.metadata
    text = md["License-Expression"] or md["License"] or ""
    if not text or len(text) > 80 or "\n" in text:
        classifiers = [c.rsplit("::", 1)[1].strip() for c in md.get_all("Classifier") or []
                       if c.startswith("License ::")]
        text = ", ".join(classifiers) or "not declared in its metadata"
    return text


def copyright_text(bundled_libs: list[str], system: dict[str, str]) -> str:
    """``/usr/share/doc/nvfabric/copyright``: nvfabric, the bundled Python distributions with
    the license each declares, the interpreter, the bundled shared libraries and the system
    libraries used instead of copies."""
    lines = [
        f"nvfabric: a directory build of the nvfabric command line (/{LIBDIR}).",
        "",
        "nvfabric itself: Copyright (C) 2026 the nvfabric maintainers. Its pyproject.toml",
        "declares no license yet; ask the maintainers before redistributing.",
        "",
        "The build is a PyInstaller one-dir bundle. It contains the CPython "
        f"{sys.version.split()[0]} interpreter and",
        "standard library (Python Software Foundation License), the PyInstaller bootloader",
        "(GPL-2+ with the bootloader exception, which allows any license for the bundled",
        "program; see /usr/share/common-licenses/GPL-2), and these Python distributions, each",
        "under the license its metadata declares:",
        "",
    ]
    for dist in runtime_closure(PACKAGE):
        if dist.metadata["Name"].lower() == PACKAGE:
            continue
        lines.append(f"  {dist.metadata['Name']} {dist.version}: {license_of(dist)}")
    lines += [
        "",
        "Where a license above is the GNU GPL version 2 or later, its text is in",
        "/usr/share/common-licenses/GPL-2; the Apache License 2.0 is in",
        "/usr/share/common-licenses/Apache-2.0; the Mozilla Public License 2.0 is in",
        "/usr/share/common-licenses/MPL-2.0.",
        "",
        "Shared libraries bundled with the interpreter, each under its own license:",
        "",
    ]
    lines += [f"  {name}" for name in bundled_libs]
    lines += [
        "",
        "System libraries the interpreter's modules load from their Debian packages (not",
        "bundled; see each package's copyright file):",
        "",
    ]
    lines += [f"  {name} ({pkg})" for name, pkg in sorted(system.items())]
    return "\n".join(lines) + "\n"


def control_text(version: str, arch: str, depends: str, installed_kib: int) -> str:
    para = Deb822()
    para["Package"] = PACKAGE
    para["Version"] = version
    para["Architecture"] = arch
    para["Maintainer"] = MAINTAINER
    para["Installed-Size"] = str(installed_kib)
    para["Depends"] = depends
    para["Section"] = "admin"
    para["Priority"] = "optional"
    para["Description"] = (
        "NVLink fabric bring-up and health for NVIDIA GPU nodes\n"
        " nvfabric reads a node's GPUs, NVSwitches, InfiniBand ports and driver, plans\n"
        " the fabric services it needs (fabric manager, NVLSM then fabric manager on\n"
        " NVLink 5 baseboards, IMEX on GB200/GB300 trays), starts and supervises them,\n"
        " and says whether the fabric is usable and why.\n"
        " .\n"
        " This package holds a build of the command line that needs no Python, the\n"
        " systemd unit nvfabric.service, and nvfabric-textfile.timer, which writes the\n"
        " fabric metrics for node_exporter's textfile collector every minute; both are\n"
        " installed neither enabled nor started."
    )
    return str(para)


def gz(src: bytes) -> bytes:
    return gzip.compress(src, compresslevel=9, mtime=0)


def put(stage: Path, rel: str, data: bytes, mode: int, mtime: float) -> None:
    path = stage / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chmod(path, mode)
    os.utime(path, (mtime, mtime))


def stage_dist(dist: Path, stage: Path, leave_out: set[str], mtime: float) -> None:
    """Copy the directory build into ``stage/LIBDIR``, without the top-level files of
    ``_internal/`` named in ``leave_out``: the executable 0755, everything else 0644 (shared
    libraries too: Policy 10.9 and 8.1, they are mapped, not executed)."""
    exe = dist / PACKAGE
    for path in sorted(dist.rglob("*")):
        rel = path.relative_to(dist)
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise BuildError(f"{path}: not a plain file or directory in the directory build")
        if path.is_dir() or (rel.parent == Path("_internal") and rel.name in leave_out):
            continue
        put(stage, f"{LIBDIR}/{rel}", path.read_bytes(), 0o755 if path == exe else 0o644,
            mtime)


def build(dist: Path, units: Path, out_dir: Path) -> Path:
    """Build the package into ``out_dir``; returns its path. Raises BuildError."""
    # dpkg-shlibdeps reads the ELF objects with binutils' objdump
    for tool in ("dpkg-deb", "dpkg-query", "dpkg-shlibdeps", "objdump", "ldconfig"):
        if shutil.which(tool) is None:
            raise BuildError(f"{tool} is not installed (apt-get install dpkg-dev binutils)")
    exe = dist / PACKAGE
    if not exe.is_file() or not (dist / "_internal").is_dir():
        raise BuildError(f"{dist} is not a directory build (no {PACKAGE} beside _internal/): "
                         "make dist-dir")
    missing = [u for u in UNITS if not (units / u).is_file()]
    if missing:
        raise BuildError(f"the systemd units {', '.join(missing)} are missing from {units}")
    version = binary_version(exe)
    changelog = Changelog((HERE / "changelog").read_text(encoding="utf-8"))
    if str(changelog.version) != version:
        raise BuildError(f"packaging/debian/changelog's newest entry is {changelog.version}, "
                         f"the build is {version}: add a changelog entry")
    arch = run(["dpkg", "--print-architecture"]).strip()
    with open(exe, "rb") as f:
        machine = elf_machine(f.read(20))
    if ELF_ARCH.get(machine or -1) != arch:
        raise BuildError(f"{exe} is ELF machine {machine}, not for this host's {arch}")
    system = system_copies(dist / "_internal", arch)
    bundled = sorted(p.name for p in (dist / "_internal").iterdir()
                     if p.is_file() and ".so" in p.name and p.name not in system)
    epoch = float(os.environ.get("SOURCE_DATE_EPOCH") or exe.stat().st_mtime)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nvfabric-deb-", dir=out_dir) as tmp:
        stage = Path(tmp) / "debian" / PACKAGE
        stage_dist(dist, stage, set(system), epoch)
        files = {f"{UNIT_DIR}/{u}": ((units / u).read_bytes(), 0o644) for u in UNITS}
        files |= {
            "usr/share/man/man1/nvfabric.1.gz": (gz((HERE / "nvfabric.1").read_bytes()), 0o644),
            "usr/share/doc/nvfabric/copyright": (
                copyright_text(bundled, system).encode(), 0o644),
            # A version without a Debian revision is a native package: changelog.gz (Policy
            # 12.7).
            "usr/share/doc/nvfabric/changelog.gz": (
                gz((HERE / "changelog").read_bytes()), 0o644),
        }
        overrides = (HERE / "lintian-overrides").read_text(encoding="utf-8")
        if any(ln.strip() and not ln.startswith("#") for ln in overrides.splitlines()):
            files["usr/share/lintian/overrides/nvfabric"] = (overrides.encode(), 0o644)
        for rel, (data, mode) in files.items():
            put(stage, rel, data, mode, epoch)
        link = stage / LINK
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(f"/{LIBDIR}/{PACKAGE}", f"/{LINK.rsplit('/', 1)[0]}"), link)
        os.utime(link, (epoch, epoch), follow_symlinks=False)
        elves = sorted(str(p.relative_to(tmp)) for p in (stage / LIBDIR).rglob("*")
                       if p.is_file() and is_elf(p))
        depends = shlibs_depends(Path(tmp), elves, f"debian/{PACKAGE}/{BUNDLE}")
        pythonic = [d for d in depends if "python" in d]
        if pythonic:
            raise BuildError(f"the package would depend on Python: {', '.join(pythonic)}")
        # Installed-Size as dpkg-gencontrol counts it: KiB per file rounded up, 1 per other
        # entry (directories, links).
        entries = sorted(stage.rglob("*"))
        regular = [p for p in entries if p.is_file() and not p.is_symlink()]
        kib = sum((p.stat().st_size + 1023) // 1024 for p in regular) \
            + len(entries) - len(regular)
        md5 = "".join(f"{hashlib.md5(p.read_bytes()).hexdigest()}  "  # noqa: S324 - dpkg's format
                      f"{p.relative_to(stage)}\n" for p in regular)
        put(stage, "DEBIAN/control", control_text(version, arch, ", ".join(depends),
                                                  kib).encode(), 0o644, epoch)
        put(stage, "DEBIAN/md5sums", md5.encode(), 0o644, epoch)
        for script in ("postinst", "prerm", "postrm"):
            put(stage, f"DEBIAN/{script}", (HERE / script).read_bytes(), 0o755, epoch)
        for dirpath, _dirs, _files in os.walk(stage):
            os.chmod(dirpath, 0o755)
            os.utime(dirpath, (epoch, epoch))
        target = out_dir / f"{PACKAGE}_{version}_{arch}.deb"
        tmp_deb = Path(tmp) / target.name
        run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(stage), str(tmp_deb)])
        os.replace(tmp_deb, target)
    return target


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dist", type=Path, required=True,
                    help="the directory build (make dist-dir: dist/nvfabric-dir)")
    ap.add_argument("--units", type=Path, required=True,
                    help="the directory of the systemd units (packaging/systemd)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    try:
        print(build(args.dist, args.units, args.out))
    except BuildError as err:
        print(f"build_deb: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
