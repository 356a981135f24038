"""Build ``nvfabric_<version>_<arch>.deb`` from the single-file binary and the systemd unit.

Run by ``make deb`` with the build venv's Python (PyInstaller's archive reader and
python-debian are installed there):

    build_deb.py --binary dist/nvfabric --unit packaging/systemd/nvfabric.service --out dist

The package holds ``/usr/bin/nvfabric``, ``/lib/systemd/system/nvfabric.service`` with the
drop-in ``nvfabric.service.d/single-file-binary.conf`` (``NotifyAccess=all``: the one-file
binary notifies from its second process), the man page, ``copyright`` (generated: nvfabric
and every component the binary bundles, with the license each declares), ``changelog.gz`` (a
native package) and the lintian overrides, plus the maintainer scripts of this directory
(they never start or enable the unit).

``Depends`` is computed, not written by hand. The binary starts as PyInstaller's bootloader,
which loads its libraries (glibc, libz) from the system before it unpacks the bundle: those
come from ``dpkg-shlibdeps`` on the staged binary. The bundle holds the interpreter and its
libraries; every ELF object in it (listed with PyInstaller's CArchiveReader) is read with
``objdump``: each ``NEEDED`` library that is not in the bundle must be a file of the
installed ``libc6`` package (``dpkg-query -L libc6``, else the build fails naming it), and
they add ``libc6 (>= V)``, V the highest ``GLIBC_`` symbol version they reference.

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
from PyInstaller.archive.readers import CArchiveReader

HERE = Path(__file__).resolve().parent
PACKAGE = "nvfabric"
MAINTAINER = "nvfabric maintainers <maintainers@users.noreply.a-seed-772cf4a6.example>"
#: ELF e_machine -> Debian architecture (ELF spec, "e_machine"; dpkg's cputable).
#: The package's drop-in for the unit (NotifyAccess=all: see single-file-binary.conf).
DROPIN = "lib/systemd/system/nvfabric.service.d/single-file-binary.conf"
ELF_ARCH = {62: "amd64", 183: "arm64"}
VERSION_RX = re.compile(r"^[0-9][A-Za-z0-9.+~]*(-[A-Za-z0-9.+~]+)?$")
GLIBC_RX = re.compile(r"\bGLIBC_([0-9]+(?:\.[0-9]+)+)\b")
NEEDED_RX = re.compile(r"^\s*NEEDED\s+(\S+)$", re.MULTILINE)


class BuildError(Exception):
    """The package cannot be built as asked; the message says why."""


def run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode:
        raise BuildError(f"{argv[0]} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def binary_version(binary: Path) -> str:
    """The version the binary reports (``nvfabric, version X``), checked as a Debian version."""
    out = run([str(binary), "--version"]).strip()
    prefix = "nvfabric, version "
    if not out.startswith(prefix) or not VERSION_RX.match(out[len(prefix):]):
        raise BuildError(f"{binary} --version printed {out!r}, not 'nvfabric, version X'")
    return out[len(prefix):]


def elf_machine(data: bytes) -> int | None:
    """e_machine of an ELF image (little-endian only, as on amd64/arm64); None if not ELF."""
    if data[:4] != b"\x7fELF" or data[5] != 1:
        return None
    return int.from_bytes(data[18:20], "little")


def bundled_elves(binary: Path, into: Path) -> list[Path]:
    """Write every ELF object the one-file binary bundles into ``into``; return their paths."""
    reader = CArchiveReader(str(binary))
    out = []
    for name, entry in reader.toc.items():
        if entry[-1] != "b":
            continue
        data = reader.extract(name)
        if elf_machine(data) is None:
            continue
        path = into / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        out.append(path)
    return out


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


def bundle_libc_depends(binary: Path) -> tuple[str, list[str]]:
    """(``libc6 (>= V)`` for the bundled ELF objects, their names). The bundle's objects load
    each other from the unpacked bundle and glibc from the system: BuildError naming any
    other system library one of them needs (it would be missing on a bare host)."""
    libc_files = {os.path.basename(p) for p in run(["dpkg-query", "-L", "libc6"]).split()}
    with tempfile.TemporaryDirectory(prefix="nvfabric-deb-elf-") as tmp:
        elves = bundled_elves(binary, Path(tmp))
        bundled = {p.name for p in elves}
        versions: set[str] = set()
        foreign: dict[str, str] = {}
        for obj in elves:
            versions |= set(GLIBC_RX.findall(run(["objdump", "-T", str(obj)])))
            for lib in NEEDED_RX.findall(run(["objdump", "-p", str(obj)])):
                if lib not in bundled and lib not in libc_files:
                    foreign[lib] = obj.name
    if foreign:
        raise BuildError("bundled objects need system libraries outside libc6: " + ", ".join(
            f"{lib} (by {obj})" for lib, obj in sorted(foreign.items())))
    if not versions:
        raise BuildError(f"no GLIBC_ symbol versions found in the bundle of {binary}")
    return f"libc6 (>= {max(versions, key=version_key)})", sorted(bundled)


def bootloader_depends(workdir: Path, staged_binary: str) -> list[str]:
    """The bootloader's dependencies, by ``dpkg-shlibdeps`` (symbols files of the installed
    packages) run in ``workdir`` on ``debian/nvfabric/usr/bin/nvfabric``. The bootloader runs
    before the bundle is unpacked, so its libraries (glibc, libz) come from the system."""
    (workdir / "debian").mkdir(exist_ok=True)
    (workdir / "debian/control").write_text(
        f"Source: {PACKAGE}\n\nPackage: {PACKAGE}\nArchitecture: any\n", encoding="utf-8")
    done = subprocess.run(["dpkg-shlibdeps", "-O", f"-e{staged_binary}"], cwd=workdir,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise BuildError(f"dpkg-shlibdeps failed: {done.stderr.strip()}")
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("shlibs:Depends=")),
                None)
    if line is None:
        raise BuildError(f"dpkg-shlibdeps printed no shlibs:Depends: {done.stdout!r}")
    return [d.strip() for d in line.partition("=")[2].split(",") if d.strip()]


def newer(a: str, b: str) -> bool:
    """Debian version ``a`` > ``b`` (``dpkg --compare-versions``)."""
    return subprocess.run(["dpkg", "--compare-versions", a, "gt", b], check=False).returncode == 0


def merge_depends(items: list[str]) -> str:
    """One ``Depends`` from relations ``pkg (>= V)`` / ``pkg``: the highest version per
    package, in first-seen order."""
    best: dict[str, str | None] = {}
    for item in items:
        m = re.fullmatch(r"([a-z0-9][a-z0-9+.-]*)(?:\s*\(>=\s*([^)\s]+)\))?", item)
        if m is None:
            raise BuildError(f"unexpected dependency {item!r}")
        name, version = m.group(1), m.group(2)
        if name not in best:
            best[name] = version
        elif version and (best[name] is None or newer(version, str(best[name]))):
            best[name] = version
    return ", ".join(f"{n} (>= {v})" if v else n for n, v in best.items())


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


def copyright_text(bundled_libs: list[str]) -> str:
    """``/usr/share/doc/nvfabric/copyright``: nvfabric, the bundled Python distributions with
    the license each declares, the interpreter and the bundled shared libraries."""
    lines = [
        "nvfabric: a single-file build of the nvfabric command line.",
        "",
        "nvfabric itself: Copyright (C) 2026 the nvfabric maintainers. Its pyproject.toml",
        "declares no license yet; ask the maintainers before redistributing.",
        "",
        "The binary is a PyInstaller one-file bundle. It contains the CPython "
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
        "Shared libraries bundled with the interpreter (from the build host's Debian",
        "packages, each under its own license: OpenSSL Apache-2.0, zlib, xz-utils, bzip2,",
        "libffi and expat MIT-style, mpdecimal BSD):",
        "",
    ]
    lines += [f"  {name}" for name in bundled_libs if not name.startswith("python3.")]
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
        " This package holds a single-file build of the command line that needs no\n"
        " Python, and the systemd unit nvfabric.service, installed neither enabled nor\n"
        " started."
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


def build(binary: Path, unit: Path, out_dir: Path) -> Path:
    """Build the package into ``out_dir``; returns its path. Raises BuildError."""
    for tool in ("dpkg-deb", "dpkg-query", "dpkg-shlibdeps", "objdump"):
        if shutil.which(tool) is None:
            raise BuildError(f"{tool} is not installed (apt-get install dpkg-dev binutils)")
    if not unit.is_file():
        raise BuildError(f"the systemd unit {unit} does not exist")
    version = binary_version(binary)
    changelog = Changelog((HERE / "changelog").read_text(encoding="utf-8"))
    if str(changelog.version) != version:
        raise BuildError(f"packaging/debian/changelog's newest entry is {changelog.version}, "
                         f"the binary is {version}: add a changelog entry")
    arch = run(["dpkg", "--print-architecture"]).strip()
    machine = elf_machine(binary.read_bytes()[:64])
    if ELF_ARCH.get(machine or -1) != arch:
        raise BuildError(f"{binary} is ELF machine {machine}, not for this host's {arch}")
    bundle_libc, bundled = bundle_libc_depends(binary)
    epoch = float(os.environ.get("SOURCE_DATE_EPOCH") or binary.stat().st_mtime)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nvfabric-deb-", dir=out_dir) as tmp:
        stage = Path(tmp) / "debian" / PACKAGE
        files = {
            "usr/bin/nvfabric": (binary.read_bytes(), 0o755),
            "lib/systemd/system/nvfabric.service": (unit.read_bytes(), 0o644),
            DROPIN: ((HERE / "single-file-binary.conf").read_bytes(), 0o644),
            "usr/share/man/man1/nvfabric.1.gz": (gz((HERE / "nvfabric.1").read_bytes()), 0o644),
            "usr/share/doc/nvfabric/copyright": (copyright_text(bundled).encode(), 0o644),
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
        depends = merge_depends(
            [*bootloader_depends(Path(tmp), f"debian/{PACKAGE}/usr/bin/nvfabric"), bundle_libc])
        kib = sum((len(d) + 1023) // 1024 for d, _ in files.values()) + 4 * len(files)
        md5 = "".join(f"{hashlib.md5(d).hexdigest()}  {rel}\n"  # noqa: S324 - dpkg's format
                      for rel, (d, _) in sorted(files.items()))
        put(stage, "DEBIAN/control", control_text(version, arch, depends, kib).encode(),
            0o644, epoch)
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
    ap.add_argument("--binary", type=Path, required=True)
    ap.add_argument("--unit", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    try:
        print(build(args.binary, args.unit, args.out))
    except BuildError as err:
        print(f"build_deb: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
