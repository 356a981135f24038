"""Unix sockets a run looks at: NVLSM's IPC socket (is it there, does someone else serve it,
does the NVLSM we started listen on it yet), and the Unix socket the supervisor sends
systemd's notifications on (:func:`unix_socket`).

Sockets are made with :mod:`socket` (its enum tables and :mod:`array` cost the lean
supervisor process about 0.45 MiB of resident memory over the private C module it wraps: the
price of the public module, measured by bench/bench_run.py).
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat

SOCK_STREAM: int = socket.SOCK_STREAM
SOCK_DGRAM: int = socket.SOCK_DGRAM


def unix_socket(kind: int) -> contextlib.closing[socket.socket]:
    """A new Unix socket of ``kind`` (:data:`SOCK_STREAM`, :data:`SOCK_DGRAM`), closed on
    leaving the ``with`` block. Raises OSError."""
    return contextlib.closing(socket.socket(socket.AF_UNIX, kind))


def socket_listening(path: str) -> bool:
    """True when a process accepts connections on the Unix socket at ``path`` (a path longer
    than sockaddr_un allows is reached through ``/proc/self/fd`` of its directory)."""
    fd = None
    try:
        name = path
        if len(os.fsencode(path)) >= 100:
            fd = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY)
            name = f"/proc/self/fd/{fd}/{os.path.basename(path)}"
        with unix_socket(SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            sock.connect(name)
        return True
    except OSError:
        return False
    finally:
        if fd is not None:
            os.close(fd)


def is_socket(path: str) -> bool:
    """True when ``path`` is a socket (links followed); False when it cannot be read."""
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False



#: The kernel's table of the Unix sockets of this process's network namespace (proc(5)
#: ``/proc/net/unix``; ``/proc/net`` is a link to ``/proc/self/net``).
#:
#: Why this table for every ``--root``, a simulated tree's too: the socket looked for is the
#: one of an NVLSM that this process started (its child, in its network namespace, on this
#: kernel), whatever tree it was started from; a tree's own ``proc/net/unix`` would be a
#: capture, never the table its fakes' sockets are in. A root whose ``proc`` is the live
#: procfs (:func:`nvfabric.model.hostpath.is_live`) shows this same table there.
UNIX_TABLE = "/proc/self/net/unix"
#: Bound of one read of the table: a line is ~100 bytes; 16 MiB is 160,000 sockets.
UNIX_TABLE_MAX_BYTES = 16 << 20
#: ``__SO_ACCEPTCON`` (include/linux/net.h), the Flags column of a listening socket.
ACCEPTCON = 0x00010000
#: ``SS_UNCONNECTED`` (include/uapi/linux/net.h), the St column of a listening socket.
UNCONNECTED = "01"


def listens(path: str, table: str = UNIX_TABLE) -> bool | None:
    """True when a Unix socket bound at ``path`` is listening (listen(2) was called: its file
    exists from bind(2) on, and refuses connections until then), read from the kernel's
    ``table`` (:data:`UNIX_TABLE`) without connecting to it: a connection could disturb the
    daemon. False when no listening socket of that path is in the table; None when the table
    cannot be read (no procfs), or is larger than :data:`UNIX_TABLE_MAX_BYTES`.

    A line: ``Num RefCount Protocol Flags Type St Inode Path`` (net/unix/af_unix.c,
    unix_seq_show), the path as the daemon gave it to bind(2). A daemon that bound a path
    too long for sockaddr_un (108 bytes) through a shorter name for the same file
    (``/proc/PID/fd/N/NAME``, a link) is matched by the file that name leads to: the same
    device and inode as ``path``."""
    try:
        fd = os.open(table, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks, got = [], 0
        while got <= UNIX_TABLE_MAX_BYTES:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    if got > UNIX_TABLE_MAX_BYTES:
        return None
    target = os.fsencode(path)
    base = b"/" + target.rpartition(b"/")[2]
    same: tuple[int, int] | None = None
    for line in b"".join(chunks).split(b"\n")[1:]:
        if not line.endswith(base):
            continue
        fields = line.split(None, 7)
        if len(fields) != 8 or fields[5] != UNCONNECTED.encode():
            continue
        try:
            if not int(fields[3], 16) & ACCEPTCON:
                continue
        except ValueError:
            continue
        name = fields[7]
        if name == target:
            return True
        if same is None:
            try:
                info = os.stat(path)
            except OSError:
                return False
            same = (info.st_dev, info.st_ino)
        try:
            other = os.stat(name)
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == same:
            return True
    return False
