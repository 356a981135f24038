"""Atomic file replacement: write a temp file in the same directory, fsync, rename; keep a
backup of what is replaced. A crash at any point leaves either the old or the new file whole.
"""

from __future__ import annotations

import os
import shutil
import tempfile


def write_atomic(path: str, content: str | bytes, mode: int = 0o644, backup: bool = True,
                 dir_mode: int = 0o755) -> None:
    """Replace ``path`` with ``content``.

    The parent directory is created (``dir_mode``, default 0o755) when missing; an existing
    one keeps its mode (never widened, RUN.md R06). When ``backup`` is set and the
    file exists with different content, it is copied to ``path + ".nvfabric.bak"`` first.
    Raises OSError on failure; the previous file is then untouched.
    """
    data = content.encode() if isinstance(content, str) else content
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=dir_mode, exist_ok=True)
    if backup and os.path.isfile(path):
        with open(path, "rb") as fh:
            old = fh.read()
        if old != data:
            shutil.copy2(path, path + ".nvfabric.bak")
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
