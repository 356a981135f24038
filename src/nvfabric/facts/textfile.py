"""Input files named on the command line (``--from-nvidia-smi``, ``doctor --log``, ``domain
check`` reports, ``--imex-peers``, ``imex config --peers``, ``imex domain --from-file``, a bug
report, a fetch record): opened and read, bounded, ``-`` standing for stdin.

Every blocking step of such a read (the ``open`` of a FIFO, which waits for its writer; each
``read`` of stdin, a pipe or a device) runs under :func:`nvfabric.effects.stop.reading`, so
SIGINT or SIGTERM ends a command blocked there at once (``interrupted``, exit 130 or 143)
instead of being lost in a restarted system call.

A compressed file (logrotate leaves ``/var/log/kern.log.2.gz``; an operator attaches a
capture as ``.xz``) is told by its first bytes, not its name, and read decompressed as it is
read (:func:`decompressing`): gzip, xz and bzip2 with the standard library; every bound below
is of the decompressed bytes, so a gzip bomb stops at it. zstd is refused naming the command
that decompresses it (the standard library reads it only from Python 3.14).
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import re
import stat
import zlib
from collections.abc import Callable
from typing import IO, Protocol

from nvfabric.effects import stop
from nvfabric.model.errors import usage_error
from nvfabric.model.strict import MiB

#: What each option's file holds, for the hint of a file that is not it.
NODE_LIST = "a text file: one address or host name per line"

#: Compressed formats by their first bytes -> (format, the command that decompresses a file
#: of it). gzip: RFC 1952 (1f 8b); xz: the .xz file format 1.2, 2.1.1 (fd '7zXZ' 00); bzip2:
#: 'BZh', the block-size digit and the magic of a block (pi) or of the stream's end (sqrt pi);
#: zstd: RFC 8878, 3.1.1 (28 b5 2f fd).
_MAGIC = re.compile(rb"(\x1f\x8b)|(\xfd7zXZ\x00)|(BZh[1-9](?:1AY&SY|\x17rE8P\x90))"
                    rb"|(\x28\xb5\x2f\xfd)")
COMPRESSIONS: tuple[tuple[str, str], ...] = (
    ("gzip", "zcat"), ("xz", "xzcat"), ("bzip2", "bzcat"), ("zstd", "zstdcat"))
#: The formats read here (the standard library's decompressors), by name.
_OPENERS: dict[str, Callable[[IO[bytes]], io.BufferedIOBase]] = {
    "gzip": lambda f: gzip.GzipFile(fileobj=f, mode="rb"),
    "xz": lambda f: lzma.LZMAFile(f, mode="rb"),
    "bzip2": lambda f: bz2.BZ2File(f, mode="rb"),
}
#: The command that tests a file of each format read here.
_TEST = {"gzip": "gzip -t", "xz": "xz -t", "bzip2": "bzip2 -t"}
#: The bytes :func:`compression_of` looks at.
MAGIC_BYTES = 10


def compression_of(head: bytes) -> str | None:
    """The compressed format whose magic ``head`` (a file's first :data:`MAGIC_BYTES`) starts
    with (``gzip``, ``xz``, ``bzip2``, ``zstd``), or None."""
    m = _MAGIC.match(head)
    return None if m is None else COMPRESSIONS[(m.lastindex or 1) - 1][0]


class Stream(Protocol):
    """What the readers of an input file call: ``read`` and ``read1`` of at most ``size``."""

    def read(self, size: int = -1, /) -> bytes: ...

    def read1(self, size: int = -1, /) -> bytes: ...


class _Decompressed:
    """The decompressed bytes of one compressed input, read as they are asked for (``read``
    and ``read1`` of at most the size asked: memory is the caller's bound, never the file's).
    A damaged or cut stream is ``input_unreadable`` naming the file and the format; an
    OSError of the file itself (its errno set) goes to the caller as it came."""

    def __init__(self, inner: io.BufferedIOBase, fmt: str, path: str) -> None:
        self.inner, self.format, self.path = inner, fmt, path

    def read(self, size: int = -1) -> bytes:
        return self._call(self.inner.read, size)

    def read1(self, size: int = -1) -> bytes:
        return self._call(self.inner.read1, size)

    def _call(self, read: Callable[[int], bytes], size: int) -> bytes:
        hint = f"copy the file again whole (`{_TEST[self.format]} {self.path}` checks it)"
        try:
            return read(size)
        except EOFError:
            raise usage_error(f"{self.path}: the {self.format} stream ends in the middle "
                              "(the file is cut short)", hint) from None
        except (lzma.LZMAError, zlib.error) as err:
            raise usage_error(f"{self.path}: the {self.format} stream is damaged ({err})",
                              hint) from None
        except OSError as err:
            if err.errno is not None:  # the file's own read failed: the caller names it
                raise
            raise usage_error(f"{self.path}: the {self.format} stream is damaged ({err})",
                              hint) from None


def decompressing(stream: io.BufferedReader, path: str) -> tuple[Stream, str | None]:
    """``stream`` as it is, or, when its first bytes are a compressed format's, the stream of
    its decompressed bytes; and the format (None: not compressed). zstd is
    ``input_unreadable`` (exit 2) naming the format and the command that decompresses it."""
    fmt = compression_of(stream.peek(MAGIC_BYTES)[:MAGIC_BYTES])
    if fmt is None:
        return stream, None
    opener = _OPENERS.get(fmt)
    if opener is None:
        shown = "FILE" if path == "-" else path
        raise usage_error(f"{path} is {fmt}-compressed, which nvfabric does not read (it "
                          "reads gzip, xz and bzip2)",
                          f"decompress it first: `{dict(COMPRESSIONS)[fmt]} {shown} > OUT`, "
                          "then give OUT")
    return _Decompressed(opener(stream), fmt, path), fmt


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
    """The bytes of ``path`` (``-``: stdin), decompressed when it is gzip, xz or bzip2
    (:func:`decompressing`), at most ``cap``: ``input_unreadable`` (exit 2) ``PATH: larger
    than N bytes, the limit for WHAT`` when there is more (``/dev/zero``, a 500 MB file, a
    gzip bomb), or naming the OS error when it cannot be read. A directory is refused by
    name; a FIFO or device is read like a file, up to the cap; a stop signal while it waits
    is :class:`nvfabric.effects.stop.Stopped`."""
    try:
        with open_input(path) as raw:
            if stat.S_ISDIR(os.fstat(raw.fileno()).st_mode):
                raise usage_error(f"{path}: is a directory, not a file", hint)
            fh, fmt = decompressing(raw, path)
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
        raise usage_error(f"{path}: larger than {_size(cap)}{_decompressed(fmt)}, the limit "
                          f"for {what}", hint)
    return data


def _decompressed(fmt: str | None) -> str:
    """What a size bound's message adds for a compressed input."""
    return "" if fmt is None else f" decompressed (a {fmt} file)"


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB and n % MiB == 0 else f"{n} bytes"


def read_text_file(path: str, what: str, limit: int = 1 << 20, holds: str = NODE_LIST) -> str:
    """A UTF-8 text file given on the command line (up to ``limit`` bytes, decompressed when
    it is gzip, xz or bzip2: :func:`decompressing`; ``-`` is stdin);
    usage error (exit 2) naming the option when it cannot be read or is not text (a binary
    file, NUL bytes), whose hint says what the file should hold (``holds``: a node list by
    default); a stop signal while it waits is :class:`nvfabric.effects.stop.Stopped`."""
    try:
        with open_input(path) as raw:
            fh, fmt = decompressing(raw, path)
            data = fh.read(limit + 1)
    except OSError as err:
        raise usage_error(f"cannot read {what} {path}: {err.strerror or err}",
                          "give a readable text file") from None
    if len(data) > limit:
        raise usage_error(f"{what} {path} is larger than {limit >> 20} MiB"
                          f"{_decompressed(fmt)}, the limit for it",
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
