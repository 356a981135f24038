"""Small, forgiving readers of sysfs/procfs attribute files under a root directory.

sysfs attributes are one value plus a newline; a missing or unreadable file is None, never an
exception, because a node tree legitimately lacks whatever its drivers did not create.

Paths are joined to the root by :func:`nvfabric.model.hostpath.under`, and under a root
other than ``/`` symbolic links are resolved as the node resolves them
(:mod:`nvfabric.model.hostpath`): an absolute target from the root, ``..`` stopping there.
Each reader opens the path as it is first (the fast path: nearly every read has no link out
of the root), checks where the descriptor really is (``/proc/self/fd``,
:func:`nvfabric.model.hostpath.escapes`), and only when that is outside the root resolves
the path under the root (:func:`nvfabric.model.hostpath.in_root`), opens the result and
checks it again. Nothing outside the root is ever read: a link to ``/etc/shadow`` reads
``<root>/etc/shadow`` or nothing; a loop of more than 40 links is as missing.
:func:`glob`, :func:`is_file`, :func:`is_dir` and :func:`lexists` answer by the same rule.
"""

from __future__ import annotations

import errno
import fnmatch
import glob as _glob
import os
from stat import S_ISDIR, S_ISREG

from nvfabric.model import hostpath
from nvfabric.model.errors import usage_error
from nvfabric.model.strict import BadValue, to_int

__all__ = ["read_text", "read_bytes", "read_hex", "read_int", "listdir", "link_name", "glob",
           "is_file", "is_dir", "lexists"]

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


def _open(path: str, flags: int) -> int:
    """``path`` opened with ``flags`` inside the root it was built under (module docstring):
    as it is when that lies inside (the fast path: one open, one look at the descriptor),
    else resolved under the root (:func:`_open_in_root`), also when the open failed because a
    link led out of the root to nothing there (:func:`_missing_here`). OSError otherwise."""
    try:
        fd = os.open(path, flags)
    except OSError:
        if _missing_here(path):
            raise
        return _open_in_root(path, flags)
    if not _outside(path, fd):
        return fd
    os.close(fd)
    return _open_in_root(path, flags)


def _open_in_root(path: str, flags: int) -> int:
    """``path`` resolved under its root as the node resolves it
    (:func:`nvfabric.model.hostpath.in_root`), opened and checked again: EXDEV when even that
    lies outside (a link swapped in between), OSError ELOOP past 40 links."""
    inside = hostpath.in_root(path)
    fd = os.open(inside, flags)
    if _outside(inside, fd):
        os.close(fd)
        raise OSError(errno.EXDEV, "leads out of the root", path)
    return fd


#: Directories seen to lie inside their root: path -> (st_dev, st_ino) of what it was then
#: (:func:`_missing_here`; a directory replaced since, by a link out of the root or another
#: directory, stats differently and is looked at again). Bounded: cleared when full.
_INSIDE: dict[str, tuple[int, int]] = {}
_INSIDE_MAX = 4096


def _missing_here(path: str) -> bool:
    """After an open of ``path`` failed: True when no link is to blame, so that ``path`` is
    missing (or unreadable) as the node sees it too: it is under no root, or the deepest
    directory above it that opens lies inside the root and the first component below that
    does not exist. False when a link may have led out of the root (that directory lies
    outside, or the component below it exists: a link to nothing out there, a file on the
    way): the caller resolves it under the root. Two system calls for a file missing from a
    directory already seen inside (:data:`_INSIDE`), a few more otherwise."""
    found = hostpath.root_of(path)
    if found is None:
        return True
    below, at = path, os.path.dirname(path)
    while True:
        try:
            info = os.stat(at)
        except OSError:
            if len(at) <= len(found[0]):
                return True  # the root itself is not there
            below, at = at, os.path.dirname(at)
            continue
        if _INSIDE.get(at) != (info.st_dev, info.st_ino) and not _seen_inside(at):
            return False
        try:
            os.lstat(below)
        except OSError:
            return True
        return False


def _seen_inside(directory: str) -> bool:
    """True when ``directory``, opened, lies inside its root (remembered in :data:`_INSIDE`)."""
    try:
        fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if _outside(directory, fd):
            return False
        info = os.fstat(fd)
    finally:
        os.close(fd)
    if len(_INSIDE) >= _INSIDE_MAX:
        _INSIDE.clear()
    _INSIDE[directory] = (info.st_dev, info.st_ino)
    return True


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
        fd = _open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not S_ISREG(info.st_mode):
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
    """Sorted entries of a directory (links resolved as the node does, see the module), []
    when missing or unreadable."""
    try:
        fd = _open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        return sorted(os.listdir(fd))
    except OSError:
        return []
    finally:
        os.close(fd)


def link_name(path: str) -> str | None:
    """Last component of a symlink's target (``driver`` -> ``mlx5_core``), or None; the
    directory holding it is found as the node finds it (see the module)."""
    parent = os.path.dirname(path) or "."
    try:
        fd = _open(parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.path.basename(os.readlink(os.path.basename(path), dir_fd=fd))
    except OSError:
        return None
    finally:
        os.close(fd)


def _stat_mode(path: str) -> int | None:
    """The mode of what ``path`` leads to, links resolved as the node does
    (:func:`nvfabric.model.hostpath.resolve`: nothing is opened, so a file nvfabric may not
    read still has its type, as for ``os.stat``); None when nothing is there (or a loop)."""
    try:
        return os.stat(hostpath.resolve(path)).st_mode
    except OSError:
        return None


def is_file(path: str) -> bool:
    """``os.path.isfile`` with links resolved as the node does (see the module)."""
    mode = _stat_mode(path)
    return mode is not None and S_ISREG(mode)


def is_dir(path: str) -> bool:
    """``os.path.isdir`` with links resolved as the node does (see the module)."""
    mode = _stat_mode(path)
    return mode is not None and S_ISDIR(mode)


def lexists(path: str) -> bool:
    """``os.path.lexists`` (the last component not followed: a dangling link exists), the
    directories on the way resolved as the node does (see the module)."""
    try:
        os.lstat(hostpath.resolve_parent(path))
    except OSError:
        return False
    return True


def glob(pattern: str) -> list[str]:
    """The sorted matches of the glob ``pattern`` (a path under a root, ``*?[`` in any
    component but the root's), as glob(3) on the node lists them: each directory on the way
    resolved as the node does (see the module), names starting with ``.`` matched only by a
    pattern starting with one (as Python's :mod:`glob`), the matches as spelt by the pattern
    (their links not resolved). Under no registered root (``--root /``): :func:`glob.glob`."""
    found = hostpath.root_of(pattern)
    if found is None:
        return sorted(_glob.glob(pattern))
    base = found[0]
    paths = [base]
    for part in pattern[len(base):].split("/"):
        if part in ("", "."):
            continue
        if not _glob.has_magic(part):
            paths = [os.path.join(p, part) for p in paths]
            continue
        hidden = part.startswith(".")
        paths = [os.path.join(p, name) for p in paths for name in listdir(p)
                 if (hidden or not name.startswith(".")) and fnmatch.fnmatchcase(name, part)]
    return sorted(p for p in paths if lexists(p))


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


#: The directories a node's root shell searches (Debian's and systemd's default PATH).
NODE_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def node_program(root: str, program: str) -> str:
    """``program`` (a bare name) as this machine runs the node's copy under ``root``: the
    name itself on ``/`` (the host's PATH finds it), else the first executable file of that
    name in :data:`NODE_PATH` under the root that execve reaches without leaving it (a link
    to an absolute target is followed from this machine's view, so a tree's
    ``usr/bin/nvidia-smi -> /bin/nvidia-smi`` is passed over for its ``bin/nvidia-smi``);
    where none is, ``ROOT/usr/bin/PROGRAM``, the vendor path."""
    if os.path.abspath(root) == "/":
        return program
    for directory in NODE_PATH:
        full = hostpath.under(root, f"{directory}/{program}")
        try:
            hostpath.program(full)  # the one rule for a program run under a root
        except hostpath.PathEscape:
            continue
        if program_path(full) is not None:
            return full
    return hostpath.under(root, f"/usr/bin/{program}")


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
