"""Log bytes to text for the diagnosis (:mod:`nvfabric.rules.diagnose`): the encoding of a
log, its blocks transcoded to UTF-8, and the lines of a block that hold a needle.

Encodings: a log is UTF-8 (bytes that are not become U+FFFD). A UTF-16 or UTF-32 log (a BOM, or
NUL bytes between ASCII characters, as Windows tools write it) is decoded as such. NUL bytes
in runs within UTF-8 text are padding, dropped: logrotate's ``copytruncate`` leaves the file
starting with NULs up to the writer's old offset, and a crash leaves NUL-filled blocks in a
syslog. A stream with other NUL bytes (a binary file), or nothing but NULs, is refused
(:class:`LogEncodingError`), never read as a log without findings.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator
from typing import IO

from nvfabric.model.errors import InputError


class LogInputError(InputError):
    """A log that nvfabric refuses to read (doctor: exit 2, ``input_unreadable``)."""


class LogEncodingError(LogInputError):
    """A log stream that is not text in an encoding nvfabric reads (UTF-8, UTF-16, UTF-32)."""


#: Byte order marks, longest first (the UTF-32 LE mark starts with the UTF-16 LE one).
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def detect_encoding(head: bytes) -> tuple[str, int]:
    """``(encoding, BOM length)`` of a log from its first bytes: a BOM decides; without one,
    NUL bytes in every other (every fourth) position of ASCII text mean UTF-16 (UTF-32) without
    a BOM. Raises :class:`LogEncodingError` for other data holding NUL bytes (a binary file, a
    core dump): such a stream is not a log."""
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name, len(bom)
    sample = head[:4096]
    if b"\0" not in sample:
        return "utf-8", 0
    even, odd = sample[0::2], sample[1::2]
    for name, step in (("utf-32-le", 4), ("utf-32-be", 4)):
        zeros = [sample[i::step] for i in range(step)]
        text = zeros[0] if name.endswith("le") else zeros[3]
        rest = zeros[1:] if name.endswith("le") else zeros[:3]
        if len(sample) >= 8 and all(set(z) == {0} for z in rest) and 0 not in text:
            return name, 0
    if len(sample) >= 4 and set(odd) == {0} and 0 not in even:
        return "utf-16-le", 0
    if len(sample) >= 4 and set(even) == {0} and 0 not in odd:
        return "utf-16-be", 0
    if _nul_padded_text(sample):
        return "utf-8", 0
    raise LogEncodingError(
        "holds NUL bytes and is neither UTF-8, UTF-16 nor UTF-32 text: not a log file")


#: NUL padding: a run of at least this many NUL bytes (an ASCII character in UTF-16 has one).
_NUL_RUN = re.compile(rb"\0{8,}")


#: Control bytes that text does not hold (tab, newline, CR, form feed and ESC excepted).
_BINARY_BYTES = re.compile(rb"[\x01-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f]")


def _nul_padded_text(sample: bytes) -> bool:
    """Whether ``sample`` is UTF-8 text whose NUL bytes all stand in runs of padding (or is
    padding only, the start of a copytruncated log), with hardly any other control byte."""
    rest = _NUL_RUN.sub(b"", sample)
    if b"\0" in rest:
        return False
    return len(_BINARY_BYTES.findall(rest)) <= len(rest) // 100


def utf8_blocks(stream: IO[bytes], block_size: int) -> Iterator[bytes]:
    """The stream's bytes as UTF-8, in reads of ``block_size`` bytes, whatever its detected
    encoding; NUL bytes of a UTF-8 stream (padding, :func:`_nul_padded_text`) are dropped.
    Raises :class:`LogEncodingError` for a stream of NUL bytes only."""
    first = stream.read(block_size)
    name, skip = detect_encoding(first)
    if name == "utf-8":
        seen = False
        block = first[skip:]
        while block:
            if b"\0" in block:
                # a block of padding only (a copytruncated log's hole, /dev/zero on stdin) is
                # dropped at memchr speed; replace() on it ran at ~100 MB/s, so reading to the
                # 16 GiB cap of `doctor - < /dev/zero` took minutes
                nuls = block.count(0)
                block = b"" if nuls == len(block) else block.replace(b"\0", b"")
            if block:
                seen = True
                yield block
            block = stream.read(block_size)
        if not seen and first:
            raise LogEncodingError("holds only NUL bytes: not a log file")
        return
    decoder = codecs.getincrementaldecoder(name)(errors="replace")
    block = first[skip:]
    while block:
        text = decoder.decode(block)
        if text:
            yield text.encode("utf-8")
        block = stream.read(block_size)
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail.encode("utf-8")


def needle_lines(data: bytes, needles: Iterable[bytes | re.Pattern[bytes]]) -> list[str]:
    """The lines of ``data`` (complete lines, ending in a newline) that contain one of
    ``needles`` (a :attr:`Classifier.scanners` tuple), decoded, in order: what a classifier
    must be fed of ``data``. Several classifiers (one per fabric kind) can share one scan."""
    starts: dict[int, int] = {}
    for needle in needles:
        if isinstance(needle, re.Pattern):
            for m in needle.finditer(data):
                start = data.rfind(b"\n", 0, m.start()) + 1
                starts[start] = data.find(b"\n", m.start())
            continue
        pos = data.find(needle)
        while pos >= 0:
            start = data.rfind(b"\n", 0, pos) + 1
            end = data.find(b"\n", pos)
            starts[start] = end
            pos = data.find(needle, end)
    return [data[start: starts[start]].decode("utf-8", "replace") for start in sorted(starts)]
