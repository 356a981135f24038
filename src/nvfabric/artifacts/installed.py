"""What ``nvfabric install`` installed, read back through its install records.

``nvfabric install`` extracts the redist archive of component C at version V into
``<prefix>/<C>-<V>/`` and writes ``.nvfabric-install.json`` there (:mod:`.install`); the default
prefix is ``/opt/nvfabric`` under ``--root``. This module finds the tree of a component (one
version, or the newest) and, in its record, the files a service needs by their names
(``nv-fabricmanager``, ``fabricmanager.cfg``, the ``*_topology`` files, ``nvlsm``,
``nvlsm.conf``), whatever the archive's inner layout. A file is offered only while it still
matches its record (present, same SHA-256): a damaged install is not silently used.
Host access: reads under the root only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..hostpath import under_root
from ..strict import int_or_none
from . import versions
from .install import read_record
from .transport import sha256_file

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

    @property
    def record(self) -> str:
        """Host path of the install record."""
        return f"{self.host_dir}/.nvfabric-install.json"

    def _intact(self, rel: str, digest: str) -> bool:
        full = under_root(self.root, f"{self.host_dir}/{rel}")
        try:
            return os.path.isfile(full) and not os.path.islink(full) \
                and sha256_file(full) == digest
        except OSError:
            return False

    def find(self, basename: str, executable: bool = False) -> str | None:
        """Host path of the recorded file named ``basename`` (the shallowest if several;
        ``executable``: its recorded mode has an execute bit), or None; only if intact."""
        hits = sorted((r for r in self.files if os.path.basename(r[0]) == basename
                       and (not executable or (int_or_none(r[2], base=8) or 0) & 0o111)),
                      key=lambda r: (r[0].count("/"), r[0]))
        for rel, digest, _ in hits:
            if self._intact(rel, digest):
                return f"{self.host_dir}/{rel}"
        return None

    def find_dir(self, suffix: str) -> str | None:
        """Host path of the directory holding recorded files whose names end with ``suffix``
        (``_topology``: fabric manager's topology files), or None."""
        dirs = sorted({os.path.dirname(r[0]) for r in self.files if r[0].endswith(suffix)},
                      key=lambda d: (d.count("/"), d))
        return f"{self.host_dir}/{dirs[0]}" if dirs else None


def installed(root: str, component: str, version: str | None = None,
              prefix: str = DEFAULT_PREFIX) -> InstalledTree | None:
    """The install of ``component`` under ``<root><prefix>``: exactly ``version`` when given
    (fabric manager must equal the driver), else the newest version with a record. None when
    there is none, or its record is unreadable or names another component."""
    base = under_root(root, prefix)
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
    for _, ver in sorted(found, reverse=True):
        host_dir = f"{prefix.rstrip('/')}/{component}-{ver}"
        record = read_record(under_root(root, host_dir))
        if record is None or record.get("component") != component:
            continue
        files = tuple((str(f["path"]), str(f["sha256"]), str(f.get("mode", "0644")))
                      for f in record.get("files", [])
                      if isinstance(f, dict) and "path" in f and "sha256" in f)
        return InstalledTree(root, component, ver, host_dir, files)
    return None
