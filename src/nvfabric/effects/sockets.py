"""Unix sockets a run looks at: NVLSM's IPC socket (is it there, does someone serve it)."""

from __future__ import annotations

import os
import socket
import stat


def socket_listening(path: str) -> bool:
    """True when a process accepts connections on the Unix socket at ``path`` (a path longer
    than sockaddr_un allows is reached through ``/proc/self/fd`` of its directory)."""
    fd = None
    try:
        name = path
        if len(os.fsencode(path)) >= 100:
            fd = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY)
            name = f"/proc/self/fd/{fd}/{os.path.basename(path)}"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
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

