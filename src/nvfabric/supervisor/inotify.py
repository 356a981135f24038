"""A directory watch with inotify(7) through libc (ctypes): how the supervisor sees NVLSM's
IPC socket appear without polling."""

from __future__ import annotations

import contextlib
import ctypes
import os


class Inotify:
    """Directory watch with inotify(7) through libc (ctypes): readable when an entry is
    created, moved in or changed. Raises OSError when inotify is unavailable."""

    IN_ATTRIB = 0x00000004
    IN_MOVED_TO = 0x00000080
    IN_CREATE = 0x00000100
    IN_NONBLOCK = 0o4000
    IN_CLOEXEC = 0o2000000

    _libc: ctypes.CDLL | None = None

    def __init__(self, directory: str) -> None:
        if Inotify._libc is None:
            Inotify._libc = ctypes.CDLL(None, use_errno=True)
        libc = Inotify._libc
        fd = libc.inotify_init1(self.IN_NONBLOCK | self.IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        mask = self.IN_CREATE | self.IN_MOVED_TO | self.IN_ATTRIB
        if libc.inotify_add_watch(fd, os.fsencode(directory), mask) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, os.strerror(err), directory)
        self.fd: int = fd

    def drain(self) -> None:
        """Read (and forget) every pending event: readable again at the next change."""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while os.read(self.fd, 65536):
                pass

    def close(self) -> None:
        """Stop watching (close the descriptor)."""
        with contextlib.suppress(OSError):
            os.close(self.fd)

