"""Input files named on the command line (``--from-nvidia-smi``, ``doctor --log``, ``domain
check`` reports, ``--imex-peers``, ``imex config --peers``, ``imex domain --from-file``, a bug
report, a fetch record): opened and read, bounded, ``-`` standing for stdin.

Every blocking step of such a read (the ``open`` of a FIFO, which waits for its writer; each
``read`` of stdin, a pipe or a device) runs under :func:`nvfabric.effects.stop.reading`, so
SIGINT or SIGTERM ends a command blocked there at once (``interrupted``, exit 130 or 143)
instead of being lost in a restarted system call.
"""

from __future__ import annotations

import io
import os
import stat

from nvfabric.effects import stop
from nvfabric.model.errors import usage_error
from nvfabric.model.strict import MiB

#: What each option's file holds, for the hint of a file that is not it.
NODE_LIST = "a text file: one address or host name per line"


class _StopRaw(io.RawIOBase):
    """The raw reader of one descriptor whose reads end on a stop signal
    (:func:`nvfabric.effects.stop.reading`); ``closefd``: close it with the stream (not
    stdin's)."""

    def __init__(self, fd: int, what: str, closefd: bool) -> None:
        super().__init__()
        self.fd, self.what, self.closefd = fd, what, closefd

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        with stop.reading(self.what):
            return os.readv(self.fd, [buffer])

    def close(self) -> None:
        if not self.closed and self.closefd:
            os.close(self.fd)
        super().close()


def open_input(path: str, buffering: int = 1 << 16) -> io.BufferedReader:
    """``path`` (``-``: stdin) as a buffered binary stream whose blocking steps end on a stop
    signal (the module docstring). OSError when it cannot be opened; the caller names it."""
    if path == "-":
        return io.BufferedReader(_StopRaw(0, "stdin", closefd=False), buffering)
    with stop.reading(path):  # a FIFO's open waits for its writer
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    return io.BufferedReader(_StopRaw(fd, path, closefd=True), buffering)


def read_capped(path: str, cap: int, what: str, hint: str = "") -> bytes:
    """The bytes of ``path`` (``-``: stdin), at most ``cap``: ``input_unreadable`` (exit 2)
    ``PATH: larger than N bytes, the limit for WHAT`` when there is more (``/dev/zero``, a
    500 MB file), or naming the OS error when it cannot be read. A directory is refused by
    name; a FIFO or device is read like a file, up to the cap; a stop signal while it waits
    is :class:`nvfabric.effects.stop.Stopped`."""
    try:
        with open_input(path) as fh:
            if stat.S_ISDIR(os.fstat(fh.fileno()).st_mode):
                raise usage_error(f"{path}: is a directory, not a file", hint)
            chunks: list[bytes] = []
            got = 0
            while got <= cap:
                chunk = fh.read1(min(cap + 1 - got, MiB))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            data = b"".join(chunks)
    except OSError as err:
        raise usage_error(f"cannot read {path}: {err.strerror or err}", hint) from None
    if len(data) > cap:
        raise usage_error(f"{path}: larger than {_size(cap)}, the limit for {what}", hint)
    return data


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB and n % MiB == 0 else f"{n} bytes"


def read_text_file(path: str, what: str, limit: int = 1 << 20, holds: str = NODE_LIST) -> str:
    """A UTF-8 text file given on the command line (up to ``limit`` bytes; ``-`` is stdin);
    usage error (exit 2) naming the option when it cannot be read or is not text (a binary
    file, NUL bytes), whose hint says what the file should hold (``holds``: a node list by
    default); a stop signal while it waits is :class:`nvfabric.effects.stop.Stopped`."""
    try:
        with open_input(path) as fh:
            data = fh.read(limit + 1)
    except OSError as err:
        raise usage_error(f"cannot read {what} {path}: {err.strerror or err}",
                          "give a readable text file") from None
    if len(data) > limit:
        raise usage_error(f"{what} {path} is larger than {limit >> 20} MiB, the limit for it",
                          "give the file itself, not a device or a larger file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise usage_error(f"{what} {path} is not a text file (byte 0x{data[err.start]:02x} at "
                          f"offset {err.start} is not UTF-8)",
                          f"give {holds}") from None
    if "\x00" in text:
        raise usage_error(f"{what} {path} is not a text file (it holds NUL bytes)",
                          f"give {holds}")
    return text
