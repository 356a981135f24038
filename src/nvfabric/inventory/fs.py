"""Small, forgiving readers of sysfs/procfs attribute files under a root directory.

sysfs attributes are one value plus a newline; a missing or unreadable file is None, never an
exception, because a node tree legitimately lacks whatever its drivers did not create.
"""

from __future__ import annotations

import os


def under(root: str, path: str) -> str:
    """``path`` (absolute, host view) resolved under ``root``."""
    return root.rstrip("/") + "/" + path.lstrip("/")


def read_text(path: str, limit: int = 65536) -> str | None:
    """The stripped text of a file, or None when missing/unreadable (bad UTF-8 is replaced)."""
    data = read_bytes(path, limit)
    return None if data is None else data.decode("utf-8", "replace").strip()


def read_bytes(path: str, limit: int = 32768) -> bytes | None:
    """Up to ``limit`` raw bytes of a file, or None when missing/unreadable.

    Plain ``os.open``/``os.read`` (no buffered file object): sysfs attributes are read whole in
    one call, and a node has hundreds of them.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        left = limit
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


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
