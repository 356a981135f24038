"""A small, fast byte mutator for nvfabric's readers (in-process, no coverage feedback).

Each call takes a seed (a real capture from the corpus) and applies 1-4 mutations chosen to
reach the kinds of bad input the fuzz campaigns found (tests/data/fuzz/README.md): digits
that ``str.isdigit()`` accepts but ``int()`` does not (``²``, ``٣``), signs (``--1``),
numbers past Python's 4,300-digit limit, every Unicode line boundary and control character,
NUL, broken UTF-8, unknown XML encodings, deep nesting (``[[[[``, ``{"a":{"a":``, YAML
``- - - -``, hostlist ``[][]``), repeated lines and long runs (quadratic parsers), a JSON
value of another type where an object stands, fields glued together where a damaged copy lost
its blanks (``00: d600``), plus plain bit flips, deletions and splices with other seeds.
Deterministic for a given ``random.Random``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence

#: Tokens worth inserting: one per kind of bad input.
TOKENS: tuple[bytes, ...] = (
    "²".encode(), "٣".encode(), "１".encode(), b"--1", b"-", b"+1", b"1_0", b" 1 ", b"0x",
    b"0x" + b"f" * 40, b"9" * 4301, b"1" + b"0" * 5000, b"-" + b"9" * 4400, b"1e999",
    b"NaN", b"Infinity", b"\x00", b"\n", b"\r", b"\r\n", b"\x0b", b"\x0c", b"\x1c", b"\x1d",
    b"\x1e", "\x85".encode(), "\u2028".encode(), "\u2029".encode(), b"\x1b[31m", b"\x7f",
    b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b":", b": ", b"=", b"#", b",", b'"', b"'",
    b"[", b"]", b"{", b"}", b"[]", b"{}", b"null", b"true", b"\"x\"", b"[1]", b"{\"a\":1}",
    b"N/A", b"[N/A]", b"<", b">", b"</", b"<![CDATA[", b"&amp;", b"&#0;", b"&x;",
    b'<?xml version="1.0" encoding="x-bogus"?>', b"!!timestamp", b"!!int x", b"!!binary",
    b"&a", b"*a", b"- ", b"? ", b"|", b">-", b"%", b"@", b"`", b"\t", b" " * 64, b"..",
    b"/", b"/../../etc/passwd", b"GPU 00000000:18:00.0\n", b"Fabric\n", b"    State : ",
    b"Package: nvidia-fabricmanager\n", b"Size: ", b"Version: 580.95.05-1\n", b"\n\n",
    b"Domain State: UP\n", b"Node #0 - ", b"0 C C C\n", b"FM_SM_IPC_INTERFACE=/", b"rc: ",
    b"[1-99999]", b"[0-9999999999]", b"[1-9][1-9][1-9]", b"/a" * 3000,
)

#: Openers for deep nesting, and what closes them (empty: an unclosed run).
NESTING: tuple[tuple[bytes, bytes], ...] = (
    (b"[", b"]"), (b'{"a":', b"}"), (b"<a>", b"</a>"), (b"- ", b""), (b"[][", b"]"),
    (b"{a: ", b"}"), (b"((", b"))"),
)


_DIGITS = re.compile(rb"[0-9]+")


def _insert(rng: random.Random, data: bytes, chunk: bytes) -> bytes:
    at = rng.randint(0, len(data))
    return data[:at] + chunk + data[at:]


def _replace_digits(rng: random.Random, data: bytes) -> bytes:
    """A digit run of the input replaced by a bad number (the field keeps its place)."""
    runs = [m.span() for _, m in zip(range(2000), _DIGITS.finditer(data), strict=False)]
    if not runs:
        return _insert(rng, data, rng.choice(TOKENS[:14]))
    at, end = rng.choice(runs)
    return data[:at] + rng.choice(TOKENS[:14]) + data[end:]


def _nest(rng: random.Random, data: bytes) -> bytes:
    opener, closer = rng.choice(NESTING)
    depth = rng.choice((70, 200, 1200, 5000, 20000))
    return _insert(rng, data, opener * depth + closer * (depth if rng.random() < 0.5 else 0))


def _repeat(rng: random.Random, data: bytes) -> bytes:
    """A line or a span repeated many times: long lines, thousands of equal lines."""
    if not data:
        return b"x" * rng.randint(1, 20000)
    lines = data.splitlines(keepends=True)
    line = rng.choice(lines) if lines else data
    # never more than ~400 KB of repeats: the mutator itself must not be what fills memory
    times = min(rng.choice((2, 10, 100, 1000, 5000)), max(1, 400_000 // max(1, len(line))))
    if rng.random() < 0.5:
        at = rng.randint(0, len(data))
        return data[:at] + line * times + data[at:]
    span = line.rstrip(b"\n") or b" "
    return data.replace(line, span * min(times, 200_000 // len(span) + 1) + b"\n", 1)


def _squeeze(rng: random.Random, data: bytes) -> bytes:
    """The blanks of one line removed, fields glued together as a damaged copy shows them
    (``00: d6 00`` -> ``00:d600``, ``Port GUID: 0x..`` -> ``PortGUID:0x..``)."""
    lines = data.split(b"\n")
    if not lines:
        return data
    i = rng.randrange(len(lines))
    line = lines[i]
    if rng.random() < 0.5:
        lines[i] = line.replace(b" ", b"")
    else:  # only the blanks after the first colon: the key stays, its values are glued
        key, sep, rest = line.partition(b": ")
        lines[i] = key + sep + rest.replace(b" ", b"") if sep else line.replace(b" ", b"", 1)
    return b"\n".join(lines)


def _bitflip(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return bytes([rng.randrange(256)])
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    return bytes(buf)


def _delete(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return data
    at = rng.randrange(len(data))
    return data[:at] + data[at + rng.randint(1, min(len(data) - at, 512)):]


def _truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randint(0, len(data))]


def _byte(rng: random.Random, data: bytes) -> bytes:
    return _insert(rng, data, bytes([rng.randrange(256)]) * rng.choice((1, 1, 2, 3)))


#: Cheap mutations often, the ones that grow an input (nesting, repeats) about one time in ten.
MUTATIONS: tuple[Callable[[random.Random, bytes], bytes], ...] = (
    lambda rng, d: _insert(rng, d, rng.choice(TOKENS)),
    lambda rng, d: _insert(rng, d, rng.choice(TOKENS)),
    lambda rng, d: _insert(rng, d, rng.choice(TOKENS)),
    _replace_digits, _replace_digits, _replace_digits, _bitflip, _bitflip, _delete, _delete,
    _byte, _byte, _truncate, _nest, _repeat, _squeeze,
)


def mutate(rng: random.Random, seed: bytes, others: Sequence[bytes], limit: int) -> bytes:
    """A mutant of ``seed`` (1-4 mutations, sometimes a splice with another seed), at most
    ``limit`` bytes."""
    data = seed
    if others and rng.random() < 0.1:
        other = rng.choice(others)
        cut = rng.randint(0, len(data))
        data = data[:cut] + other[rng.randint(0, len(other)):]
    for _ in range(rng.choice((1, 1, 2, 3, 4))):
        data = rng.choice(MUTATIONS)(rng, data)
        if len(data) > limit:
            data = data[:limit]
    return data
