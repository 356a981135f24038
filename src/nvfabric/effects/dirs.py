"""Directories of a run: created 0700 and never widened (RUN.md R06), and what stands in the
way of one."""

from __future__ import annotations

import os


def not_a_directory(path: str) -> str | None:
    """The first of ``path`` and its ancestors that exists and is not a directory (a file
    where the state directory should be), else None. Symbolic links are followed."""
    probe = os.path.abspath(path)
    chain = []
    while True:
        chain.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    for candidate in reversed(chain):  # from / down
        if not os.path.exists(candidate):
            return None
        if not os.path.isdir(candidate):
            return candidate
    return None




def ensure_dir(path: str, mode: int = 0o700) -> bool:
    """Create ``path`` (and missing parents, 0755) with ``mode`` when it does not exist; an
    existing directory is left exactly as it is (R06). Returns True when created."""
    if os.path.isdir(path):
        return False
    parent = os.path.dirname(path.rstrip("/"))
    if parent and not os.path.isdir(parent):
        os.makedirs(parent, mode=0o755, exist_ok=True)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        return False
    os.chmod(path, mode)  # mkdir's mode is cut by the umask; this is the mode we asked for
    return True

