"""Atomic file replacement: write a temp file in the same directory, fsync, rename; keep a
backup of what is replaced. A crash at any point leaves either the old or the new file whole.

Three doors, one mechanism (:func:`staged`): :func:`write_atomic` for content in memory,
:func:`atomic_writer` for content streamed in (downloads), :func:`staged` itself for a node
made some other way (an IMEX channel made with mknod).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO


@contextlib.contextmanager
def staged(path: str, mode: int = 0o644, dir_mode: int = 0o755,
           suffix: str = "") -> Iterator[str]:
    """A temporary name beside ``path`` (same directory, so the rename is atomic) for the
    block to create; when the block ends without an exception the node is chmod'ed to
    ``mode`` (the umask applied when it was made), renamed over ``path`` and the directory
    fsync'ed. On any exception, the block's included, the temporary is removed and ``path``
    is untouched.

    The parent directory is created (``dir_mode``) when missing; an existing one keeps its
    mode (never widened, RUN.md R06). Nothing exists at the yielded name when the block
    starts. Raises OSError on failure, naming ``path`` (not the temporary) when the failure
    had no file of its own (a write or fsync that met a full disk: ENOSPC).
    """
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=dir_mode, exist_ok=True)
    tmp = os.path.join(
        directory, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(4).hex()}{suffix}"
    )
    try:
        yield tmp
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if err.filename is None or err.filename == tmp:  # a write, fsync or the temporary:
            raise OSError(err.errno, err.strerror, path) from err  # name the file it is for
        raise
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


@contextlib.contextmanager
def atomic_writer(path: str, mode: int = 0o644, dir_mode: int = 0o755,
                  suffix: str = "") -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` when the block ends without an exception: its
    data is flushed and fsync'ed, then renamed over ``path`` (:func:`staged`). An exception
    in the block (a failed download, a checksum that does not match) leaves ``path`` as it
    was and no temporary behind. ``suffix`` marks the temporary (``.part``)."""
    with staged(path, mode, dir_mode, suffix) as tmp, open(tmp, "xb") as fh:
        yield fh
        fh.flush()
        os.fsync(fh.fileno())


def write_atomic(path: str, content: str | bytes, mode: int = 0o644, backup: bool = True,
                 dir_mode: int = 0o755) -> None:
    """Replace ``path`` with ``content``.

    The parent directory is created (``dir_mode``, default 0o755) when missing; an existing
    one keeps its mode (never widened, RUN.md R06). When ``backup`` is set and the
    file exists with different content, it is copied to ``path + ".nvfabric.bak"`` first,
    itself atomically and with the old file's mode: whatever is at the backup's name is
    replaced, never written through (a symbolic link there, say out of a ``--root`` tree,
    is replaced by the copy and its target left alone; a directory there fails the write).
    Raises OSError on failure; the previous file is then untouched.
    """
    data = content.encode() if isinstance(content, str) else content
    if backup and os.path.isfile(path):
        with open(path, "rb") as fh:
            old = fh.read()
            old_mode = stat.S_IMODE(os.fstat(fh.fileno()).st_mode)
        if old != data:
            with atomic_writer(path + ".nvfabric.bak", old_mode, dir_mode) as out:
                out.write(old)
    with atomic_writer(path, mode, dir_mode) as out:
        out.write(data)
