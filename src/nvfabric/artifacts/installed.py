"""What ``nvfabric install`` installed, read back through its install records.

``nvfabric install`` extracts the redist archive of component C at version V into
``<prefix>/<C>-<V>/`` and writes ``.nvfabric-install.json`` there (:mod:`.install`); the default
prefix is ``/opt/nvfabric`` under ``--root``. This module finds the tree of a component (one
version, or the newest) and, in its record, the files a service needs by their names
(``nv-fabricmanager``, ``fabricmanager.cfg``, the ``*_topology`` files, ``nvlsm``,
``nvlsm.conf``), whatever the archive's inner layout. A file is offered only while it still
matches its record (present, same SHA-256, a regular file whose real location, links followed,
is inside the root): a damaged install is not silently used. A record whose entries are not
what ``install`` writes (a path that is absolute or has ``..``, a digest that is not 64 hex
digits, a mode that is not octal) offers nothing, and :attr:`InstalledTree.damaged` says why.
Host access: reads under the root only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from nvfabric.facts.fs import sha256_file
from nvfabric.model import versions
from nvfabric.model.hostpath import confined, under
from nvfabric.model.strict import BadValue, control_free, int_or_none, parse_json

#: The install record nvfabric install writes into each directory it installs (the files of
#: one archive and their sha256).
RECORD = ".nvfabric-install.json"

#: An install record lists each file of one archive: a few KiB; 64 MiB is far past any.
MAX_RECORD = 64 << 20


def read_record(directory: str) -> dict[str, Any] | None:
    """The install record in ``directory``, or None when absent or unreadable."""
    try:
        with open(os.path.join(directory, RECORD), "rb") as fh:
            data = parse_json(fh.read(MAX_RECORD + 1))
    except (OSError, BadValue):
        return None  # a damaged record (a number past the bounds, nesting): install again
    return data if _well_formed(data) else None


def _well_formed(data: object) -> bool:
    """A record of the shape :func:`record` writes: ``files`` objects with string ``path`` and
    ``sha256``, ``links`` objects with string ``path`` and ``target``, paths without NUL or
    control characters. Anything else is a damaged record (the install is redone)."""
    if not isinstance(data, dict):
        return False
    for key, fields in (("files", ("path", "sha256")), ("links", ("path", "target"))):
        entries = data.get(key, [])
        if not isinstance(entries, list):
            return False
        for entry in entries:
            if not isinstance(entry, dict) or not all(
                    isinstance(entry.get(f), str) and control_free(entry[f]) for f in fields):
                return False
    return True



#: ``nvfabric install``'s default prefix (host path; commands/fetch.py DEFAULT_PREFIX).
DEFAULT_PREFIX = "/opt/nvfabric"


@dataclass(frozen=True)
class InstalledTree:
    """One installed component: ``host_dir`` its directory as a host path
    (``/opt/nvfabric/fabricmanager-570.148.08``), ``files`` the record's regular files as
    ``(relative path, sha256, mode)``."""

    root: str
    component: str
    version: str
    host_dir: str
    files: tuple[tuple[str, str, str], ...]
    damaged: str | None = None

    @property
    def record(self) -> str:
        """Host path of the install record."""
        return f"{self.host_dir}/.nvfabric-install.json"

    def _inside(self, rel: str) -> str | None:
        """The file's path under the root, or None when a link on the way leads out of it."""
        try:
            return confined(self.root, f"{self.host_dir}/{rel}" if rel else self.host_dir)
        except ValueError:
            return None

    def _intact(self, rel: str, digest: str) -> bool:
        full = self._inside(rel)
        try:
            return full is not None and os.path.isfile(full) and not os.path.islink(full) \
                and sha256_file(full) == digest
        except OSError:
            return False

    def problem(self, basename: str) -> str | None:
        """Why the recorded file(s) named ``basename`` (or, for ``_topology``, ending so)
        cannot be used, for a message: the record is damaged, the file is not in the record,
        or it no longer matches it. None when :meth:`find` would find it."""
        if self.damaged is not None:
            return f"its install record {self.record} is damaged ({self.damaged})"
        hits = [r for r in self.files if os.path.basename(r[0]) == basename
                or (basename.startswith("_") and r[0].endswith(basename))]
        if not hits:
            return f"its install record {self.record} lists no {basename}"
        if any(self._intact(rel, digest) for rel, digest, _ in hits):
            return None
        return (f"{self.host_dir}/{hits[0][0]} no longer matches its install record "
                f"{self.record} (missing, changed, replaced by a link or leading out of the "
                "root)")

    def find(self, basename: str, executable: bool = False) -> str | None:
        """Host path of the recorded file named ``basename`` (the shallowest if several;
        ``executable``: its recorded mode has an execute bit), or None; only if intact."""
        if self.damaged is not None:
            return None
        hits = sorted((r for r in self.files if os.path.basename(r[0]) == basename
                       and (not executable or (int_or_none(r[2], base=8) or 0) & 0o111)),
                      key=lambda r: (r[0].count("/"), r[0]))
        for rel, digest, _ in hits:
            if self._intact(rel, digest):
                return f"{self.host_dir}/{rel}"
        return None

    def find_dir(self, suffix: str) -> str | None:
        """Host path of the directory holding recorded files whose names end with ``suffix``
        (``_topology``: fabric manager's topology files), or None; only if one of those files
        is intact."""
        if self.damaged is not None:
            return None
        hits = sorted((r for r in self.files if r[0].endswith(suffix)),
                      key=lambda r: (r[0].count("/"), r[0]))
        for rel, digest, _ in hits:
            if self._intact(rel, digest):
                return f"{self.host_dir}/{os.path.dirname(rel)}".rstrip("/")
        return None


_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_MODE = re.compile(r"^0?[0-7]{3,4}$")


def _entries(record: dict[str, Any]) -> tuple[tuple[tuple[str, str, str], ...], str | None]:
    """The record's regular files as ``(relative path, sha256, mode)``, and why the record is
    damaged (None when every entry is what :mod:`.install` writes)."""
    files = record.get("files")
    if not isinstance(files, list):
        return (), "'files' is not a list"
    out: list[tuple[str, str, str]] = []
    for n, entry in enumerate(files, 1):
        if not isinstance(entry, dict):
            return (), f"file entry {n} is not an object"
        path, digest, mode = entry.get("path"), entry.get("sha256"), entry.get("mode", "0644")
        if not isinstance(path, str) or not path or path.startswith("/") \
                or any(c in path for c in "\n\r\x00") \
                or any(part in ("", ".", "..") for part in path.split("/")):
            return (), f"file entry {n}: path {path!r} is not a plain relative path"
        if not isinstance(digest, str) or not _DIGEST.match(digest):
            return (), f"file entry {n} ({path}): sha256 {digest!r} is not 64 hex digits"
        if not isinstance(mode, str) or not _MODE.match(mode):
            return (), f"file entry {n} ({path}): mode {mode!r} is not an octal mode"
        out.append((path, digest, mode))
    return tuple(out), None


def installed(root: str, component: str, version: str | None = None,
              prefix: str = DEFAULT_PREFIX) -> InstalledTree | None:
    """The install of ``component`` under ``<root><prefix>``: exactly ``version`` when given
    (fabric manager must equal the driver), else the newest version with a record. None when
    there is none, or its record is unreadable or names another component; a record with
    damaged entries gives a tree that offers nothing (:attr:`InstalledTree.damaged`)."""
    base = under(root, prefix)
    try:
        names = os.listdir(base)
    except OSError:
        return None
    found: list[tuple[tuple[int, ...], str]] = []
    for name in names:
        head, sep, ver = name.partition("-")
        if head != component or not sep or (version is not None and ver != version):
            continue
        key = versions.fields(ver)
        if key is not None:
            found.append((key, ver))
    first_damaged: InstalledTree | None = None
    for _, ver in sorted(found, reverse=True):
        host_dir = f"{prefix.rstrip('/')}/{component}-{ver}"
        where = under(root, host_dir)
        record = read_record(where)
        if record is None:
            if not os.path.lexists(os.path.join(where, RECORD)):
                continue
            tree = InstalledTree(root, component, ver, host_dir, (), "not a readable JSON object")
        elif record.get("component") != component:
            tree = InstalledTree(root, component, ver, host_dir, (),
                                 f"it names component {record.get('component')!r}")
        else:
            files, damaged = _entries(record)
            tree = InstalledTree(root, component, ver, host_dir, files, damaged)
        if tree.damaged is None:
            return tree
        first_damaged = first_damaged or tree
    return first_damaged
