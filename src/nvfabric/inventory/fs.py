"""Small, forgiving readers of sysfs/procfs attribute files under a root directory.

sysfs attributes are one value plus a newline; a missing or unreadable file is None, never an
exception, because a node tree legitimately lacks whatever its drivers did not create.
"""

from __future__ import annotations

import os


def under(root: str, path: str) -> str:
    """``path`` (absolute, host view) resolved under ``root``."""
    return os.path.join(root, path.lstrip("/"))


def read_text(path: str, limit: int = 65536) -> str | None:
    """The stripped text of a file, or None when missing/unreadable/not UTF-8-ish."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit)
    except OSError:
        return None
    return data.decode("utf-8", "replace").strip()


def read_bytes(path: str, limit: int = 32768) -> bytes | None:
    """Up to ``limit`` raw bytes of a file, or None when missing/unreadable."""
    try:
        with open(path, "rb") as fh:
            return fh.read(limit)
    except OSError:
        return None


def read_hex(path: str) -> int | None:
    """A ``0x``-prefixed (or bare) hex attribute as an int, or None."""
    text = read_text(path)
    if not text:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


def listdir(path: str) -> list[str]:
    """Sorted entries of a directory, [] when missing."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def link_name(path: str) -> str | None:
    """Last component of a symlink's target (``driver`` -> ``mlx5_core``), or None."""
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None
