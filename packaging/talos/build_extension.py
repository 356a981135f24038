"""Assemble the Talos system extension nvfabric for one architecture, on the build host, for
``make talos-layout`` / ``make talos-image`` (deploy/talos/Containerfile then copies it, FROM
scratch, so nothing of the target architecture runs during the build):

    build_extension.py --arch aarch64 --dist dist/nvfabric-dir --glibc-root ROOT \\
        --version 0.1.0 --driver-version 570.148.08 --ext build/talos/ext

The extension directory (``--ext``) gets, beside what ``nvfabric install --from ... --layout
vendor`` already laid into the service's root (fabric manager, NVLSM, IMEX at their vendor
paths):

- ``manifest.yaml`` (deploy/talos/manifest.yaml, version ``<version>-<driver version>``);
- ``rootfs/usr/local/etc/containers/nvfabric.yaml``: deploy/talos/nvfabric-<arch>.yaml;
- ``rootfs/usr/local/lib/containers/nvfabric/`` (the service's root): the one-dir build at
  ``usr/lib/nvfabric/`` with ``usr/bin/nvfabric`` linked to it; the glibc it runs on, from
  ``--glibc-root`` (the root it was built on, of the target architecture), at the loader's own
  paths; ``etc/passwd`` and ``etc/group`` with root alone; the mount points of the spec.

Every path comes from ``--arch``, never from the build host: the loader
(``/lib64/ld-linux-x86-64.so.2``, ``/lib/ld-linux-aarch64.so.1``: the psABI's interpreter
names, as siderolabs/talos pkg/machinery/extensions/extensions.go's AllowedPaths comment
states them), the multiarch library directory, the service spec. The build's executable must
be an ELF file of that architecture (e_machine 62 or 183), else the build stops naming both.
Exit status 1 with one line on any refusal; nothing is left half-written in ``--ext`` that a
rerun (``make`` starts from a fresh directory) would keep.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "talos"
NAME = "nvfabric"
CONTAINER_ROOT = f"usr/local/lib/containers/{NAME}"
SPEC_PATH = f"usr/local/etc/containers/{NAME}.yaml"

#: Per target architecture: ELF e_machine (ELF spec; EM_X86_64 62, EM_AARCH64 183), the glibc
#: loader (PT_INTERP of every dynamic executable there) and the multiarch library directory.
ARCHES: dict[str, tuple[int, str, str]] = {
    "x86_64": (62, "lib64/ld-linux-x86-64.so.2", "lib/x86_64-linux-gnu"),
    "aarch64": (183, "lib/ld-linux-aarch64.so.1", "lib/aarch64-linux-gnu"),
}

#: What the one-dir build takes from the system, not from its _internal/: glibc's libraries,
#: libz of its bootloader (linked against the system's, see the Makefile), libgcc_s (glibc
#: dlopens it for pthread_exit and cancellation) and the NSS module for /etc/passwd lookups.
GLIBC_LIBS = ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
              "libutil.so.1", "libresolv.so.2", "libnss_files.so.2", "libz.so.1",
              "libgcc_s.so.1")


class BuildError(Exception):
    """The extension cannot be built as asked; the message says why."""


def elf_machine(path: Path) -> int | None:
    """e_machine of a little-endian ELF file, or None when it is not one."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[5] != 1:
        return None
    return int.from_bytes(head[18:20], "little")


def resolve_in(root: Path, rel: str) -> Path:
    """``rel`` inside ``root`` with every link on the way followed inside ``root`` (an
    absolute link target is taken from ``root``, as in a chroot): the real file a root's
    ``/lib64/ld-linux-x86-64.so.2`` is. BuildError on a loop or a missing file."""
    parts = [p for p in rel.split("/") if p]
    done: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        here = root.joinpath(*done, part)
        if here.is_symlink():
            hops += 1
            if hops > 40:
                raise BuildError(f"{rel}: too many links in {root}")
            target = os.readlink(here)
            if target.startswith("/"):
                done = []
            parts = [p for p in target.split("/") if p and p != "."] + parts
            continue
        done.append(part)
    out = root.joinpath(*done)
    if not out.is_file():
        raise BuildError(f"{rel} is not a file in the glibc root {root}")
    return out


def copy_tree(src: Path, dest: Path) -> None:
    """``src`` to ``dest`` with links kept, modes without group or world write bits."""
    shutil.copytree(src, dest, symlinks=True)
    for dirpath, dirnames, filenames in os.walk(dest):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            if not path.is_symlink():
                path.chmod(stat.S_IMODE(path.stat().st_mode) & 0o755)


def build(arch: str, dist: Path, glibc_root: Path, version: str, driver: str,
          ext: Path) -> None:
    """Assemble ``ext`` (see module doc). Raises BuildError."""
    if arch not in ARCHES:
        raise BuildError(f"architecture {arch!r} is not one of {', '.join(ARCHES)}")
    machine, loader, libdir = ARCHES[arch]
    entry = dist / NAME
    found = elf_machine(entry)
    if found != machine:
        raise BuildError(f"{entry} is ELF machine {found}, not {arch}'s {machine}: build "
                         f"nvfabric on {arch} (make dist-dir there) and pass it as TALOS_DIST")
    if not (dist / "_internal").is_dir():
        raise BuildError(f"{dist} is not a one-dir build (no _internal/): make dist-dir")
    spec = DEPLOY / f"nvfabric-{arch}.yaml"
    croot = ext / "rootfs" / CONTAINER_ROOT
    croot.mkdir(parents=True, exist_ok=True)
    copy_tree(dist, croot / "usr/lib" / NAME)
    (croot / "usr/bin").mkdir(parents=True, exist_ok=True)
    (croot / "usr/bin" / NAME).symlink_to(f"../lib/{NAME}/{NAME}")
    for rel in (loader, *(f"{libdir}/{lib}" for lib in GLIBC_LIBS)):
        dest = croot / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(resolve_in(glibc_root, rel), dest)
        dest.chmod(0o755)
    mounts = yaml.safe_load(spec.read_text(encoding="utf-8"))["container"]["mounts"]
    for mount in mounts:
        target = croot / mount["destination"].lstrip("/")
        if "libnvidia-ml" not in mount["destination"]:
            target.mkdir(parents=True, exist_ok=True)
    (croot / "proc").mkdir(exist_ok=True)
    (croot / "etc").mkdir(exist_ok=True)
    (croot / "etc/passwd").write_text("root:x:0:0:root:/:/sbin/nologin\n", encoding="ascii")
    (croot / "etc/group").write_text("root:x:0:\n", encoding="ascii")
    specs = ext / "rootfs" / SPEC_PATH
    specs.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(spec, specs)
    manifest = yaml.safe_load((DEPLOY / "manifest.yaml").read_text(encoding="utf-8"))
    manifest["metadata"]["version"] = f"{version}-{driver}"
    manifest["metadata"]["description"] += (
        f"This image: driver {driver}, {arch}.\n")
    (ext / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False),
                                       encoding="utf-8")
    for dirpath, dirnames, filenames in os.walk(ext):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            if not path.is_symlink():
                path.chmod(stat.S_IMODE(path.stat().st_mode) & 0o755)
    os.chmod(ext, 0o755)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", required=True)
    ap.add_argument("--dist", type=Path, required=True)
    ap.add_argument("--glibc-root", type=Path, required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--driver-version", required=True)
    ap.add_argument("--ext", type=Path, required=True)
    args = ap.parse_args()
    try:
        build(args.arch, args.dist, args.glibc_root, args.version, args.driver_version,
              args.ext)
    except (BuildError, OSError) as err:
        print(f"build_extension: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
