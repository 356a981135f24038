"""Lay verified redist archives out at the vendor paths under a root: an image being built
(``nvfabric install --from DIR --root IMAGE_ROOT --layout vendor``), so that the image holds
fabric manager, NVLSM or IMEX where their packages put them and ``nvfabric run`` there finds
them as on a node with the packages installed.

Each archive of the fetch record (its sha256 checked again by the caller) is read member by
member and placed by :data:`nvfabric.artifacts.tables.VENDOR_LAYOUT` (archive directory ->
vendor directory, the library directory named by the *target* architecture's multiarch tuple);
members in no listed directory are not laid out (``skipped``). Order of work:

1. **Plan, pure**: every member's destination; a link is kept only when what it points to is
   laid out too (its target rewritten relative to its new place); two archives placing
   different content at one path, or a component missing a file ``run`` needs (fabric
   manager's binary, shipped config and a topology file; NVLSM's binary and config; IMEX's
   daemon, ctl tool and config) refuse the whole layout (``archive_unsafe`` for a clash,
   ``artifact_not_available`` for a missing file): nothing is written.
2. **Check the root**: every destination must resolve inside the root with links followed
   (a base image's absolute ``/lib64`` link is refused, exit 2), and an existing file there
   must be a regular file with the same bytes (a second layout of the same archives is a no-op)
   or it is refused (``archive_unsafe``): nothing is written.
3. **Write**: files by temporary file, fsync and rename (mode from the archive, setuid and
   world-write bits dropped as tarfile's ``data`` filter does), links by rename of a new link,
   then the layout record ``/usr/share/nvfabric/fabric.json`` (every file with its sha256).

Archives are extracted into a private staging directory first by
:func:`nvfabric.artifacts.safetar.extract` (its two gates: nothing absolute, no ``..``, no
device, no link leaving the archive).
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nvfabric.artifacts.cachefile import Cached
from nvfabric.artifacts.safetar import extract
from nvfabric.artifacts.tables import MULTIARCH, VENDOR_LAYOUT
from nvfabric.bringup import fabricmanager as fm
from nvfabric.bringup import nvlsm
from nvfabric.bringup.vendor import TOPOLOGY_DIR
from nvfabric.effects.atomic import write_atomic
from nvfabric.facts.fs import sha256_file
from nvfabric.model.errors import NvfabricError, usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import PathEscape, confined
from nvfabric.rules.imex.tables import CONFIG_PATH, IMEX_BINARY, IMEX_CTL_BINARY

#: The layout record, a host path under the root.
RECORD = "/usr/share/nvfabric/fabric.json"
FORMAT = 1

#: Host paths each component must have laid out for ``nvfabric run`` (bringup's vendor paths;
#: a name ending in ``/*_topology``: at least one such file in that directory).
REQUIRED: dict[str, tuple[str, ...]] = {
    "fabricmanager": (fm.BINARY, fm.CONFIG, f"{TOPOLOGY_DIR}/*_topology"),
    "nvlsm": (nvlsm.BINARY, nvlsm.CONFIG),
    "imex": (IMEX_BINARY, IMEX_CTL_BINARY, CONFIG_PATH),
}


@dataclass(frozen=True)
class Placed:
    """One laid-out member: ``path`` its host path, ``source`` the staged file (or None for a
    link), ``target`` the link target (links only), ``mode`` the file mode to set."""

    component: str
    path: str
    source: str | None
    target: str | None
    mode: int
    digest: str | None


@dataclass(frozen=True)
class Layout:
    """What was (or would be) laid out: ``placed`` per component, ``skipped`` archive members
    not laid out, ``record`` the layout record's host path."""

    placed: tuple[Placed, ...]
    skipped: dict[str, tuple[str, ...]]
    record: str

    def to_json(self, entries: Sequence[Cached]) -> list[dict[str, Any]]:
        """One object per archive: component, version, files and links laid out, skipped
        members (for ``install --json``'s ``installed``)."""
        out = []
        for c in entries:
            comp = c.artifact.component
            mine = [p for p in self.placed if p.component == comp]
            out.append({
                "component": comp, "version": c.artifact.version, "layout": "vendor",
                "path": self.record, "changed": None,
                "files": sorted(p.path for p in mine if p.target is None),
                "links": sorted(p.path for p in mine if p.target is not None),
                "skipped": list(self.skipped.get(comp, ())),
            })
        return out


def destination(component: str, member: str, arch: str) -> str | None:
    """The host path of archive member ``member`` (relative, top directory stripped) of
    ``component`` for target ``arch``, or None when no layout row takes it. Pure."""
    rows = sorted(VENDOR_LAYOUT.get(component, ()), key=lambda r: -len(r[0]))
    for top, dest in rows:
        if member.startswith(top + "/"):
            rest = member[len(top) + 1:]
            return posixpath.join(dest.format(multiarch=MULTIARCH[arch]), rest)
    return None


def missing(component: str, paths: set[str]) -> list[str]:
    """The :data:`REQUIRED` paths of ``component`` not in ``paths`` (host paths laid out).
    Pure."""
    out = []
    for need in REQUIRED.get(component, ()):
        if need.endswith("/*_topology"):
            folder = need.rsplit("/", 1)[0]
            if not any(p.startswith(folder + "/") and p.endswith("_topology") for p in paths):
                out.append(need)
        elif need not in paths:
            out.append(need)
    if not REQUIRED.get(component) and not paths:
        out.append(f"any file of {', '.join(top for top, _ in VENDOR_LAYOUT[component])}/")
    return out


def lay_out(root: str, directory: str, entries: Sequence[Cached], arch: str,
            dry_run: bool = False) -> Layout:
    """Lay the verified archives ``entries`` (files in ``directory``) out under ``root`` for
    target ``arch`` (canonical: x86_64, aarch64); see the module doc for the order and the
    errors. ``dry_run``: plan and check only, write nothing."""
    if arch not in MULTIARCH:
        raise usage_error(f"no vendor layout for architecture {arch!r}",
                          "pass --arch x86_64 or --arch aarch64")
    unknown = [c.artifact.component for c in entries if c.artifact.component not in VENDOR_LAYOUT]
    if unknown:
        raise usage_error(f"no vendor layout for {', '.join(unknown)}",
                          "lay out redist archives of " + ", ".join(VENDOR_LAYOUT))
    with tempfile.TemporaryDirectory(prefix="nvfabric-layout-") as tmp:
        placed: list[Placed] = []
        skipped: dict[str, tuple[str, ...]] = {}
        for n, c in enumerate(entries):
            staged = os.path.join(tmp, str(n))
            extract(os.path.join(directory, c.file), staged)
            mine, skip = _plan(c.artifact.component, staged, arch)
            lacking = missing(c.artifact.component, {p.path for p in mine})
            if lacking:
                raise _lacking(c, lacking)
            placed += mine
            skipped[c.artifact.component] = skip
        _no_clash(placed)
        fulls = _check_root(root, placed)
        layout = Layout(tuple(placed), skipped, RECORD)
        if not dry_run:
            for p, full in zip(placed, fulls, strict=True):
                _write(p, full)
            record = confined(root, RECORD, "the layout record")
            os.makedirs(os.path.dirname(record), mode=0o755, exist_ok=True)
            write_atomic(record, json.dumps(_record(layout, entries, arch), indent=2) + "\n",
                         backup=False)
    return layout


def _plan(component: str, staged: str, arch: str) -> tuple[list[Placed], tuple[str, ...]]:
    """(placements, skipped members) of one staged archive. Links whose target is not laid
    out are skipped; a link's target is rewritten relative to its new directory."""
    files: dict[str, Placed] = {}
    links: list[tuple[str, str, str]] = []  # (member, host path, target member)
    skipped: list[str] = []
    for dirpath, dirnames, filenames in os.walk(staged):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames
                                        if os.path.islink(os.path.join(dirpath, d))]):
            full = os.path.join(dirpath, name)
            member = os.path.relpath(full, staged)
            dest = destination(component, member, arch)
            if dest is None:
                skipped.append(member)
                continue
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                target = posixpath.normpath(posixpath.join(posixpath.dirname(member),
                                                           os.readlink(full)))
                links.append((member, dest, target))
            elif stat.S_ISREG(st.st_mode):
                mode = stat.S_IMODE(st.st_mode) & 0o755 | 0o644
                files[member] = Placed(component, dest, full, None, mode, sha256_file(full))
    placed = list(files.values())
    for member, dest, target in links:
        goes = destination(component, target, arch)
        if goes is None or target not in files:
            skipped.append(member)
            continue
        placed.append(Placed(component, dest, None,
                             posixpath.relpath(goes, posixpath.dirname(dest)), 0o777, None))
    return placed, tuple(sorted(skipped))


def _no_clash(placed: Sequence[Placed]) -> None:
    """``archive_unsafe`` when two members (of one archive or two) go to one path with
    different content."""
    seen: dict[str, Placed] = {}
    for p in placed:
        other = seen.setdefault(p.path, p)
        if other is not p and (other.digest, other.target) != (p.digest, p.target):
            raise NvfabricError(Finding(
                "archive_unsafe", "error",
                f"{other.component} and {p.component} both place {p.path}, with different "
                "content: refused, nothing was written",
                "lay out archives of one driver release (fetch them together)",
                {"path": p.path, "components": [other.component, p.component]}), exit_code=1)


def _check_root(root: str, placed: Sequence[Placed]) -> list[str]:
    """The full path of each placement under ``root``, each proven to resolve inside it;
    an existing file there must have the same bytes (or be the same link)."""
    fulls = []
    for p in placed:
        try:
            full = confined(root, p.path, "a vendor path")
        except PathEscape as err:
            raise usage_error(str(err), "lay out into a root whose directories are real "
                              "directories or relative links (an image being built)") from None
        if os.path.lexists(full):
            same = (os.path.islink(full) and os.readlink(full) == p.target) if p.target else \
                (os.path.isfile(full) and not os.path.islink(full)
                 and sha256_file(full) == p.digest)
            if not same:
                raise NvfabricError(Finding(
                    "archive_unsafe", "error",
                    f"{p.path} already exists under {root} with other content: refused, "
                    "nothing was written",
                    "lay the fabric out into a fresh image root (the vendor packages of "
                    "another version are there)", {"path": p.path}), exit_code=1)
        fulls.append(full)
    return fulls


def _write(p: Placed, full: str) -> None:
    """One placement: a file by temporary file, fsync and rename; a link by rename of a new
    link. An identical file or link already there is left as it is."""
    os.makedirs(os.path.dirname(full), mode=0o755, exist_ok=True)
    if os.path.lexists(full):
        return
    tmp = f"{full}.nvfabric-new"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    if p.target is not None:
        os.symlink(p.target, tmp)
    else:
        assert p.source is not None
        with open(p.source, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
            os.fsync(dst.fileno())
        os.chmod(tmp, p.mode)
    os.replace(tmp, full)


def _record(layout: Layout, entries: Sequence[Cached], arch: str) -> dict[str, Any]:
    """The layout record: each archive (component, version, URL, sha256, the driver it was
    fetched for) with the files (host path, sha256, mode) and links laid out."""
    out = []
    for c in entries:
        comp = c.artifact.component
        mine = [p for p in layout.placed if p.component == comp]
        out.append({
            "component": comp, "version": c.artifact.version, "arch": c.artifact.arch,
            "url": c.artifact.url, "archive_sha256": c.artifact.sha256,
            "driver_version": c.driver_version,
            "files": [{"path": p.path, "sha256": p.digest, "mode": f"{p.mode:04o}"}
                      for p in sorted(mine, key=lambda q: q.path) if p.target is None],
            "links": [{"path": p.path, "target": p.target}
                      for p in sorted(mine, key=lambda q: q.path) if p.target is not None],
        })
    return {"format": FORMAT, "arch": arch, "layout": "vendor", "artifacts": out}


def _lacking(c: Cached, lacking: list[str]) -> NvfabricError:
    return NvfabricError(Finding(
        "artifact_not_available", "error",
        f"{c.file}: the {c.artifact.component} {c.artifact.version} archive has no "
        f"{', '.join(lacking)} at its vendor layout: refused, nothing was written",
        "fetch the archive NVIDIA publishes for this driver again; an archive of another "
        "layout needs its own row in the vendor layout table",
        {"component": c.artifact.component, "missing": lacking}), exit_code=1)

