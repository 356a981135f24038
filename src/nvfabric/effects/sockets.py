"""Unix sockets a run looks at: NVLSM's IPC socket (is it there, does someone serve it), and
the Unix socket the supervisor sends systemd's notifications on (:func:`unix_socket`).

Sockets are made with :mod:`_socket`, the C module that :mod:`socket` wraps: the wrapper's
enum tables of every address family, socket kind and flag (and :mod:`array`) are about
0.45 MiB that the lean supervisor process, up for days, would hold for two calls (issue 15:
its idle resident memory). The C socket object is the same one (``socket.socket`` is its
subclass); its errors are the same OSErrors.
"""

from __future__ import annotations

import _socket
import contextlib
import os
import stat

SOCK_STREAM: int = _socket.SOCK_STREAM
SOCK_DGRAM: int = _socket.SOCK_DGRAM


def unix_socket(kind: int) -> contextlib.closing[_socket.socket]:
    """A new Unix socket of ``kind`` (:data:`SOCK_STREAM`, :data:`SOCK_DGRAM`), closed on
    leaving the ``with`` block. Raises OSError."""
    return contextlib.closing(_socket.socket(_socket.AF_UNIX, kind))


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

