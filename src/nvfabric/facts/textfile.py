"""Input files named on the command line (``--from-nvidia-smi``, ``doctor --log``, ``domain
check`` reports, ``--imex-peers``, ``imex config --peers``, ``imex domain --from-file``, a bug
report, a fetch record): opened and read, bounded, ``-`` standing for stdin.

Every blocking step of such a read (the ``open`` of a FIFO, which waits for its writer; each
``read`` of stdin, a pipe or a device) runs under :func:`nvfabric.effects.stop.reading`, so
SIGINT or SIGTERM ends a command blocked there at once (``interrupted``, exit 130 or 143)
instead of being lost in a restarted system call.

A compressed file (logrotate leaves ``/var/log/kern.log.2.gz``; an operator attaches a
capture as ``.xz``) is told by its first bytes, not its name, and read decompressed as it is
read (:func:`decompressing`): gzip, xz and bzip2 with the standard library's decompressors,
stream after stream as ``zcat`` reads them, bytes after the last one a warning
(:class:`_Decompressed`); what the file holds (a log, an event history) is told by the first
decompressed bytes (``peek``), the same on stdin. Every bound below is of the decompressed
bytes, so a gzip bomb stops at it. zstd is refused naming the command
that decompresses it (the standard library reads it only from Python 3.14).
"""

from __future__ import annotations

import bz2
import io
import lzma
import os
import re
import stat
import sys
import zlib
from collections.abc import Callable
from typing import Any, Protocol

from nvfabric.effects import stop
from nvfabric.effects.log import printable
from nvfabric.model.errors import usage_error
from nvfabric.model.strict import MiB
from nvfabric.model.words import plural

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
#: The formats read here, by name -> a new decompressor of one stream (a gzip member, an xz
#: or bzip2 stream) of the standard library: ``decompress(data, max_length)``, ``eof``,
#: ``unused_data``; zlib's keeps what it did not take in ``unconsumed_tail`` (wbits 31: a
#: gzip member, its CRC-32 and length checked), lzma's and bz2's keep it themselves.
_DECOMPRESSORS: dict[str, Callable[[], Any]] = {
    "gzip": lambda: zlib.decompressobj(31),
    "xz": lzma.LZMADecompressor,
    "bzip2": bz2.BZ2Decompressor,
}
#: The command that tests a file of each format read here.
_TEST = {"gzip": "gzip -t", "xz": "xz -t", "bzip2": "bzip2 -t"}
#: The bytes :func:`compression_of` looks at.
MAGIC_BYTES = 10
_BLOCK = 1 << 16


def compression_of(head: bytes) -> str | None:
    """The compressed format whose magic ``head`` (a file's first :data:`MAGIC_BYTES`) starts
    with (``gzip``, ``xz``, ``bzip2``, ``zstd``), or None."""
    m = _MAGIC.match(head)
    return None if m is None else COMPRESSIONS[(m.lastindex or 1) - 1][0]


class Stream(Protocol):
    """What the readers of an input file call: ``read``, ``read1`` and ``peek``."""

    def read(self, size: int = -1, /) -> bytes: ...

    def read1(self, size: int = -1, /) -> bytes: ...

    def peek(self, size: int = 0, /) -> bytes: ...


def where(path: str) -> str:
    """How a message names an input: the file, or ``the stream on stdin`` for ``-``."""
    return "the stream on stdin" if path == "-" else path


class _Decompressed:
    """The decompressed bytes of one compressed input, read as they are asked for (``read``,
    ``read1`` and ``peek`` of at most the size asked: memory is the caller's bound, never
    the file's). The input may hold several streams one after the other (``cat a.gz b.gz``,
    ``pigz`` and ``pbzip2`` write so); each is read in turn, as ``zcat`` reads them.

    Bytes after the last whole stream that do not start another (``(cat f.gz; echo x)``) are
    read and counted, not decompressed, and said as one warning on stderr at the end
    (:attr:`trailing`): the data before them is whole (each stream's check matched), as gzip
    and bzip2 say (``decompression OK, trailing garbage ignored``). A damaged stream or one
    cut short is ``input_unreadable`` naming the input and the format; an OSError of the file
    itself (its errno set) goes to the caller as it came."""

    def __init__(self, raw: io.BufferedReader, fmt: str, path: str) -> None:
        self.raw, self.format, self.path = raw, fmt, path
        self._new = _DECOMPRESSORS[fmt]
        self._d: Any = self._new()
        self._input = b""  # input not yet given to the decompressor
        self._out = b""  # decompressed, not yet returned (peek)
        self._done = False
        #: The bytes after the last whole stream (set once the input is read to its end).
        self.trailing: int | None = None

    def read1(self, size: int = -1) -> bytes:
        want = size if size > 0 else _BLOCK
        if not self._out:
            self._out = self._next(want)
        block, self._out = self._out[:want], self._out[want:]
        return block

    def read(self, size: int = -1) -> bytes:
        parts: list[bytes] = []
        got = 0
        while size < 0 or got < size:
            block = self.read1(_BLOCK if size < 0 else min(size - got, _BLOCK))
            if not block:
                break
            parts.append(block)
            got += len(block)
        return b"".join(parts)

    def peek(self, size: int = 0) -> bytes:
        while len(self._out) < max(size, 1):
            more = self._next(max(size, 1) - len(self._out))
            if not more:
                break
            self._out += more
        return self._out

    def _next(self, want: int) -> bytes:
        """Up to ``want`` decompressed bytes; empty at the end of the input."""
        hint = f"copy the file again whole (`{_TEST[self.format]} {self.path}` checks it)"
        if self.path == "-":
            hint = (f"send the whole {self.format} data (`{_TEST[self.format]} FILE` checks "
                    "a file)")
        try:
            while not self._done:
                if self._d.eof:
                    self._between()
                    continue
                if not self._input and getattr(self._d, "needs_input", True):
                    self._input = self.raw.read1(_BLOCK)
                    if not self._input:  # what the decompressor still holds, then the end
                        out = self._d.decompress(b"", want)
                        if out or self._d.eof:
                            return bytes(out) or self._next(want)
                        raise EOFError
                out = self._d.decompress(self._input, want)
                # at a stream's end what follows is in unused_data (zlib's tail repeats it)
                self._input = b"" if self._d.eof else getattr(self._d, "unconsumed_tail", b"")
                if out:
                    return bytes(out)
            return b""
        except EOFError:
            cut = "stream" if self.path == "-" else "file"
            raise usage_error(f"{where(self.path)}: the {self.format} stream ends in the "
                              f"middle (the {cut} is cut short)", hint) from None
        except (lzma.LZMAError, zlib.error) as err:
            raise usage_error(f"{where(self.path)}: the {self.format} stream is damaged "
                              f"({err})", hint) from None
        except OSError as err:
            if err.errno is not None:  # the file's own read failed: the caller names it
                raise
            raise usage_error(f"{where(self.path)}: the {self.format} stream is damaged "
                              f"({err})", hint) from None

    def _between(self) -> None:
        """After a whole stream: begin the next one, or end (the trailing bytes counted).
        NUL bytes there are padding in gzip and xz (``gzip -t`` and ``xz -t`` pass them
        silently: the xz file format 1.2, 2.2, stream padding), not in bzip2."""
        rest, padding = self._d.unused_data, 0
        while True:
            if self.format != "bzip2":
                kept = rest.lstrip(b"\0")
                padding, rest = padding + len(rest) - len(kept), kept
            if len(rest) >= MAGIC_BYTES:
                break
            more = self.raw.read1(_BLOCK)
            if not more:
                break
            rest += more
        if rest and compression_of(rest[:MAGIC_BYTES]) == self.format:
            self._d, self._input = self._new(), rest
            return
        self._done, self._input = True, b""
        self.trailing = len(rest) + _drain(self.raw) if rest else 0
        if self.trailing:
            sys.stderr.write(f"nvfabric: warning: {printable(where(self.path))}: the "
                             f"{self.format} data is whole but followed by "
                             f"{plural(self.trailing + padding, 'byte')} that are not "
                             f"{self.format}; they were ignored (as gzip and bzip2 do)\n")


def _drain(raw: io.BufferedReader) -> int:
    """The bytes left in ``raw``, read and dropped (counted only)."""
    n = 0
    while block := raw.read1(_BLOCK):
        n += len(block)
    return n


def decompressing(stream: io.BufferedReader, path: str) -> tuple[Stream, str | None]:
    """``stream`` as it is, or, when its first bytes are a compressed format's, the stream of
    its decompressed bytes (:class:`_Decompressed`); and the format (None: not compressed).
    zstd is ``input_unreadable`` (exit 2) naming the format and the command that
    decompresses it."""
    fmt = compression_of(stream.peek(MAGIC_BYTES)[:MAGIC_BYTES])
    if fmt is None:
        return stream, None
    if fmt not in _DECOMPRESSORS:
        shown = "FILE" if path == "-" else path
        raise usage_error(f"{where(path)} is {fmt}-compressed, which nvfabric does not read "
                          "(it reads gzip, xz and bzip2)",
                          f"decompress it first: `{dict(COMPRESSIONS)[fmt]} {shown} > OUT`, "
                          "then give OUT")
    return _Decompressed(stream, fmt, path), fmt


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
