"""Install verified redist archives under a prefix, with an install record; idempotent.

Layout: archive of component C at version V -> ``<prefix>/<C>-<V>/`` (the archive's single
top-level directory stripped), and the install record ``<prefix>/<C>-<V>/.nvfabric-install.json``:
``{"component", "version", "arch", "url", "archive_sha256", "files": [{"path", "sha256",
"size", "mode"}], "links": [{"path", "target"}]}`` (paths relative to the install directory,
modes as octal strings). A second install of the same archive whose files all still match the
record changes nothing; a damaged or different install is replaced whole (staged, then
renamed).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass
from typing import Any

from nvfabric.artifacts.installed import RECORD, read_record
from nvfabric.artifacts.model import Artifact
from nvfabric.artifacts.safetar import extract
from nvfabric.effects.atomic import write_atomic
from nvfabric.facts.fs import sha256_file


@dataclass(frozen=True)
class Installed:
    """Result of one install: ``path`` the install directory, ``files`` regular files
    recorded, ``changed`` False when the existing install already matched."""

    component: str
    version: str
    path: str
    files: int
    changed: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "component": self.component, "version": self.version, "path": self.path,
            "files": self.files, "changed": self.changed,
        }


def install_dir(prefix: str, artifact: Artifact) -> str:
    """``<prefix>/<component>-<version>``."""
    return os.path.join(prefix, f"{artifact.component}-{artifact.version}")


def install_archive(archive: str, artifact: Artifact, prefix: str) -> Installed:
    """Extract the verified ``archive`` of ``artifact`` under ``prefix`` (see module doc).

    Raises ``archive_unsafe`` (nothing written), ``input_unreadable`` (damaged archive) or
    OSError from the filesystem.
    """
    target = install_dir(prefix, artifact)
    current = read_record(target)
    if current is not None and current.get("archive_sha256") == artifact.sha256 \
            and verify(target, current) == []:
        return Installed(artifact.component, artifact.version, target,
                         len(current.get("files", [])), changed=False)
    staged = target + ".nvfabric-new"
    old = target + ".nvfabric-old"
    for leftover in (staged, old):
        if os.path.lexists(leftover):
            shutil.rmtree(leftover)
    extract(archive, staged)
    record = build_record(staged, artifact)
    write_atomic(os.path.join(staged, RECORD), json.dumps(record, indent=2) + "\n",
                 backup=False)
    if os.path.lexists(target):
        os.replace(target, old)
    os.replace(staged, target)
    if os.path.lexists(old):
        shutil.rmtree(old)
    return Installed(artifact.component, artifact.version, target, len(record["files"]),
                     changed=True)


def build_record(directory: str, artifact: Artifact) -> dict[str, Any]:
    """The install record of an extracted tree (files hashed, links listed), sorted by
    path."""
    files: list[dict[str, Any]] = []
    links: list[dict[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames
                                        if os.path.islink(os.path.join(dirpath, d))]):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, directory)
            if rel == RECORD:
                continue
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                links.append({"path": rel, "target": os.readlink(full)})
            elif stat.S_ISREG(st.st_mode):
                files.append({
                    "path": rel, "sha256": sha256_file(full), "size": st.st_size,
                    "mode": f"{stat.S_IMODE(st.st_mode):04o}",
                })
    return {
        "component": artifact.component,
        "version": artifact.version,
        "arch": artifact.arch,
        "url": artifact.url,
        "archive_sha256": artifact.sha256,
        "files": files,
        "links": links,
    }


def verify(directory: str, record: dict[str, Any]) -> list[str]:
    """What differs between ``directory`` and its record: one line per missing, changed or
    relinked path (empty when the install is intact)."""
    problems: list[str] = []
    for entry in record.get("files", []):
        full = os.path.join(directory, entry["path"])
        if not os.path.isfile(full) or os.path.islink(full):
            problems.append(f"{entry['path']}: missing")
        elif sha256_file(full) != entry["sha256"]:
            problems.append(f"{entry['path']}: content changed")
    for link in record.get("links", []):
        full = os.path.join(directory, link["path"])
        if not os.path.islink(full) or os.readlink(full) != link["target"]:
            problems.append(f"{link['path']}: link changed")
    return problems
