"""Safe extraction of redist archives (``*-archive.tar.xz``).

Two gates. First a pure check of every member before anything is written: no absolute path,
no ``..`` segment, no device or FIFO, no symlink whose target leaves the extraction root, no
hard link to a path outside it. If any member is refused, the archive is refused whole and
nothing is written. Then extraction itself uses tarfile's ``data`` filter (PEP 706; Python
3.10.12+, 3.11.4+, 3.12+), which enforces the same rules again and drops setuid bits, into a
staging directory that is renamed into place only when complete.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass

from nvfabric.model.errors import NvfabricError
from nvfabric.model.findings import Finding


@dataclass(frozen=True)
class Member:
    """An archive member as the check sees it: ``kind`` is ``file``, ``dir``, ``symlink``,
    ``hardlink`` or ``other``; ``linkname`` the link target (links only)."""

    name: str
    kind: str
    linkname: str = ""


def refusals(members: Iterable[Member]) -> list[str]:
    """One line per member that must not be extracted (empty when the archive is safe).
    Pure."""
    out: list[str] = []
    for m in members:
        name = m.name
        if not name or name.startswith("/") or "\x00" in name:
            out.append(f"{name!r}: absolute or empty path")
            continue
        norm = posixpath.normpath(name)
        if ".." in name.split("/") or norm == ".." or norm.startswith("../"):
            out.append(f"{name!r}: path leaves the prefix ('..')")
            continue
        if m.kind == "other":
            out.append(f"{name!r}: device, FIFO or other special file")
        elif m.kind == "symlink":
            if m.linkname.startswith("/"):
                out.append(f"{name!r}: symlink to absolute path {m.linkname!r}")
            elif _escapes(posixpath.join(posixpath.dirname(norm), m.linkname)):
                out.append(f"{name!r}: symlink {m.linkname!r} leaves the prefix")
        elif m.kind == "hardlink" and (m.linkname.startswith("/") or _escapes(m.linkname)):
            out.append(f"{name!r}: hard link to {m.linkname!r} outside the prefix")
    return out


def _escapes(path: str) -> bool:
    norm = posixpath.normpath(path)
    return norm == ".." or norm.startswith("../") or norm.startswith("/")


def _member(info: tarfile.TarInfo) -> Member:
    if info.issym():
        kind = "symlink"
    elif info.islnk():
        kind = "hardlink"
    elif info.isdir():
        kind = "dir"
    elif info.isreg():
        kind = "file"
    else:
        kind = "other"
    return Member(info.name, kind, info.linkname)


def unsafe_archive(path: str, problems: list[str]) -> NvfabricError:
    """``archive_unsafe`` (exit 1): the archive was refused and nothing was written."""
    shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3
                                       else "")
    return NvfabricError(
        Finding(
            "archive_unsafe",
            "error",
            f"{os.path.basename(path)}: refused, nothing was written: {shown}",
            "an archive from NVIDIA never needs this; the mirror serves a tampered file",
            {"archive": path, "refused": problems},
        ),
        exit_code=1,
    )


def extract(archive: str, target: str) -> None:
    """Extract ``archive`` so that its content is at ``target`` (which must not exist).

    An archive whose members all sit under one top-level directory (NVIDIA's
    ``<name>-archive/``) has that directory stripped. Raises ``archive_unsafe`` when any member
    is refused (nothing written) and ``input_unreadable`` for a damaged archive; on any failure
    the staging directory is removed.
    """
    if not hasattr(tarfile, "data_filter"):
        raise NvfabricError(
            Finding(
                "archive_unsafe", "error",
                "this Python has no tarfile data filter (PEP 706); refusing to extract",
                "use Python 3.10.12+, 3.11.4+ or 3.12+",
            ),
            exit_code=1,
        )
    try:
        tar = tarfile.open(archive, "r:*")
    except (tarfile.TarError, OSError) as err:
        raise _damaged(archive, err) from None
    with tar:
        try:
            infos = tar.getmembers()
        except (tarfile.TarError, OSError, EOFError) as err:
            raise _damaged(archive, err) from None
        problems = refusals(_member(i) for i in infos)
        if problems:
            raise unsafe_archive(archive, problems)
        parent = os.path.dirname(os.path.abspath(target))
        os.makedirs(parent, mode=0o755, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".nvfabric-staging-", dir=parent)
        try:
            try:
                tar.extractall(staging, filter="data")
            except tarfile.FilterError as err:
                raise unsafe_archive(archive, [str(err)]) from None
            except (tarfile.TarError, OSError, EOFError) as err:
                raise _damaged(archive, err) from None
            entries = os.listdir(staging)
            root = staging
            if len(entries) == 1 and os.path.isdir(os.path.join(staging, entries[0])) \
                    and not os.path.islink(os.path.join(staging, entries[0])):
                root = os.path.join(staging, entries[0])
            os.chmod(root, 0o755)
            os.replace(root, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _damaged(archive: str, err: BaseException) -> NvfabricError:
    return NvfabricError(
        Finding(
            "input_unreadable", "error",
            f"{os.path.basename(archive)}: not a readable tar archive ({err})",
            "delete the cached file and fetch again",
            {"archive": archive},
        ),
        exit_code=2,
    )
