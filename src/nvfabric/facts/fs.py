"""Small, forgiving readers of sysfs/procfs attribute files under a root directory.

sysfs attributes are one value plus a newline; a missing or unreadable file is None, never an
exception, because a node tree legitimately lacks whatever its drivers did not create.

Under a root other than ``/``, what a link leads to outside the root is not read: it is as
missing (:func:`nvfabric.model.hostpath.escapes`, checked on what was actually opened). Paths
are joined to the root by :func:`nvfabric.model.hostpath.under`.
"""

from __future__ import annotations

import errno
import os
from stat import S_ISREG

from nvfabric.model import hostpath
from nvfabric.model.errors import usage_error
from nvfabric.model.strict import BadValue, to_int

__all__ = ["read_text", "read_bytes", "read_hex", "read_int", "listdir", "link_name"]

#: Non-blocking: opening a FIFO for reading would otherwise wait for a writer.
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


def _outside(path: str, fd: int) -> bool:
    """True when descriptor ``fd``, opened at ``path``, is a file outside the root ``path``
    was built under (a link in the tree led out of it)."""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: resolve the path instead
        real = os.path.realpath(path)
    return hostpath.escapes(path, real)


def read_text(path: str, limit: int = 65536) -> str | None:
    """The stripped text of a file, or None when missing/unreadable (bad UTF-8 is replaced)."""
    data = read_bytes(path, limit)
    return None if data is None else data.decode("utf-8", "replace").strip()


def read_bytes(path: str, limit: int = 32768) -> bytes | None:
    """Up to ``limit`` raw bytes of a regular file, or None when missing, unreadable or not a
    regular file.

    sysfs and procfs attributes, the binary ones (``config``, ``vpd``) included, are regular
    files; anything else in their place (a FIFO, a device, a socket) is not an attribute and is
    not read, so a node tree can never make nvfabric wait: the open is non-blocking (a FIFO
    without a writer would block a plain open forever) and the type is checked before reading.
    Plain ``os.open``/``os.read`` (no buffered file object): a node has hundreds of attributes.
    Reading stops at end of file, at ``limit``, or once ``st_size`` bytes are in (a file on
    disk, as in a simulated tree; sysfs reports 4096 and procfs 0, so those read to the end).
    """
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not S_ISREG(info.st_mode) or _outside(path, fd):
            return None
        data = os.read(fd, limit)
        if not data or len(data) in (limit, info.st_size):
            return data  # the common case: one read holds the whole attribute
        chunks = [data]
        got = len(data)
        while got < limit:
            chunk = os.read(fd, limit - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            if got == info.st_size:
                break
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_hex(path: str) -> int | None:
    """A ``0x``-prefixed (or bare) hex attribute as an int (strict: ASCII hex digits,
    bounded, :func:`nvfabric.model.strict.to_int`), or None when missing or not hex."""
    text = read_text(path)
    if not text:
        return None
    try:
        return to_int(text, base=16)
    except BadValue:
        return None


def read_int(path: str, *, signed: bool = False, low: int | None = None,
             high: int | None = None) -> int | None:
    """A decimal attribute (``numa_node`` ``-1``, a umad ``port``) as an int; None when the
    file is missing, unreadable or empty (the driver did not write it). A value the kernel
    never writes (``²``, ``--1``, ``1_0``, 4,000 digits) is not silently dropped: it is
    ``input_unreadable`` (exit 2) naming the file, as for every other reader."""
    text = read_text(path)
    if not text:
        return None
    try:
        return to_int(text, signed=signed, low=low, high=high, what=os.path.basename(path))
    except BadValue as err:
        raise usage_error(f"{path}: {err}",
                          "the node tree holds a value the kernel never writes there") from None


def listdir(path: str) -> list[str]:
    """Sorted entries of a directory, [] when missing (or outside the root, see the module)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        return [] if _outside(path, fd) else sorted(os.listdir(fd))
    except OSError:
        return []
    finally:
        os.close(fd)


def link_name(path: str) -> str | None:
    """Last component of a symlink's target (``driver`` -> ``mlx5_core``), or None (also when
    the directory holding it lies outside the root, see the module)."""
    parent = os.path.dirname(path) or "."
    try:
        fd = os.open(parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if _outside(parent, fd):
            return None
    finally:
        os.close(fd)
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def program_path(program: str, path_env: str | None = None) -> str | None:
    """Where ``program`` (an argv[0]) is as ``execvp`` finds it: itself when it names a
    directory part, else the first executable regular file of that name in ``path_env``
    (default ``$PATH``); None when there is none. Host view (a command run on this host, not
    under a root)."""
    import shutil

    if "/" in program:
        return program if os.path.isfile(program) and os.access(program, os.X_OK) else None
    return shutil.which(program, path=path_env if path_env is not None else
                        os.environ.get("PATH", os.defpath))


def unwritable(path: str) -> int | None:
    """The errno a write at ``path`` (a directory that may not exist yet) would fail with,
    judged without writing: EROFS when the nearest existing directory on the way is on a
    read-only filesystem, EACCES when this process may not create entries in it, ENOTDIR
    when a file stands on the way; None when it looks writable. For the checks a dry run
    shares with the real run (``run --dry-run`` writes nothing)."""
    at = os.path.abspath(path)
    while not os.path.lexists(at):
        parent = os.path.dirname(at)
        if parent == at:
            break
        at = parent
    if not os.path.isdir(at):
        return errno.ENOTDIR
    try:
        if os.statvfs(at).f_flag & os.ST_RDONLY:
            return errno.EROFS
    except OSError as err:
        return err.errno
    return None if os.access(at, os.W_OK | os.X_OK, effective_ids=os.access in
                             os.supports_effective_ids) else errno.EACCES


def sha256_file(path: str) -> str:
    """Hex SHA-256 of a file, read in 64 KiB chunks. Raises OSError."""
    import hashlib  # OpenSSL: ~7 ms to load; only installs and downloads are hashed

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 16):
            digest.update(chunk)
    return digest.hexdigest()
