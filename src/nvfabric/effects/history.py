"""The event history of a run: what happened to the fabric (bring-up, daemon exits and
restarts, live kernel events, verdict changes), appended to a bounded file in the state
directory that a crash, a ``kill -9`` or a power loss cannot corrupt; read by ``nvfabric
events``, ``doctor --log`` and ``triage``.

File format, one record a line::

    NVFE1 <length: 8 hex digits> <CRC-32: 8 hex digits> <JSON object>\\n

``length`` is the JSON's byte length and the CRC-32 (zlib's, IEEE 802.3) is of those bytes:
a record is whole when both match and the line ends in a newline. A torn last write (a crash
in the middle of write(2)) leaves a line that fails them: the reader drops it and keeps every
record before it; the writer cuts such a tail off before its first append. Each record is
written with one write(2) on an ``O_APPEND`` descriptor and made durable with fdatasync(2)
before :meth:`History.append` returns.

Bounds: the history is two files, ``events`` and ``events.1``; when ``events`` passes half of
``max_bytes`` it is renamed over ``events.1`` (the oldest records dropped) and a new one
begun (the directory fsync'ed), so the two never hold much more than ``max_bytes``. A record
is at most :data:`MAX_RECORD` bytes (long fields are cut). The reader reads at most
``max_bytes`` plus one record of each file.

A record: ``time`` (seconds since the epoch), ``kind`` (:data:`KINDS`), and for a finding its
``code``, ``severity``, ``message``, ``hint`` and fields, as ``Finding.to_json`` gives them.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from nvfabric.model.findings import Finding, is_code
from nvfabric.model.strict import parse_json
from nvfabric.model.vocab import is_severity

MAGIC = b"NVFE1 "
#: The file names in the state directory (the current one and the one before).
NAME = "events"
OLDER = NAME + ".1"
DEFAULT_MAX_BYTES = 4 << 20
#: The longest record kept whole; fields of a longer one are cut (message, hint: 1,000
#: characters; lists: 20 entries; other long values dropped).
MAX_RECORD = 8192
#: What a record says happened.
KINDS = ("run", "ready", "exit", "restart", "stop", "kernel", "kernel_repeat", "verdict",
         "dropped")
_HEAD = len(MAGIC) + 18  # magic, 8 hex, blank, 8 hex, blank


def encode(record: Mapping[str, Any]) -> bytes:
    """One record's line (see the module docstring), cut to :data:`MAX_RECORD` bytes."""
    body = json.dumps(record, separators=(",", ":"), ensure_ascii=False,
                      default=str).encode()
    if len(body) > MAX_RECORD:
        body = json.dumps(_cut(record), separators=(",", ":"), ensure_ascii=False,
                          default=str).encode()[:MAX_RECORD]
        if len(body) >= MAX_RECORD:  # still too long: the essentials only
            keep = {k: record[k] for k in ("time", "kind", "code", "severity") if k in record}
            body = json.dumps({**keep, "cut": True}, default=str).encode()
    return b"%s%08x %08x %s\n" % (MAGIC, len(body), zlib.crc32(body), body)


def _cut(record: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, str):
            out[key] = value if len(value) <= 1000 else value[:1000] + "..."
        elif isinstance(value, list | tuple):
            out[key] = [v if not isinstance(v, str) else v[:200] for v in value[:20]]
        elif isinstance(value, int | float | bool) or value is None:
            out[key] = value
    out["cut"] = True
    return out


def decode(line: bytes) -> dict[str, Any] | None:
    """The record of one line (with or without its newline), None when it is not whole."""
    if not line.startswith(MAGIC) or len(line) < _HEAD:
        return None
    try:
        length = int(line[len(MAGIC):len(MAGIC) + 8], 16)
        crc = int(line[len(MAGIC) + 9:len(MAGIC) + 17], 16)
    except ValueError:
        return None
    body = line[_HEAD:].rstrip(b"\n")
    if len(body) != length or zlib.crc32(body) != crc:
        return None
    try:
        value = parse_json(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def is_history(head: bytes) -> bool:
    """True when ``head`` (a file's first bytes) is the start of an event history."""
    return head.startswith(MAGIC)


class History:
    """The writer of one history (``directory``/``events``). Not thread-safe: the
    supervisor's loop is its one writer. Errors while writing (a full disk) are kept in
    :attr:`error` and the record is lost; the run goes on."""

    def __init__(self, directory: str, max_bytes: int = DEFAULT_MAX_BYTES,
                 clock: Any = time.time) -> None:
        self.path = os.path.join(directory, NAME)
        self.older = os.path.join(directory, OLDER)
        self.max_bytes = max(max_bytes, 4 * MAX_RECORD)
        self.clock = clock
        self.error: str | None = None
        self._fd: int | None = None
        self._size = 0

    def _open(self) -> int:
        if self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                         0o640)
            self._size = _cut_torn_tail(fd)
            self._fd = fd
            _sync_dir(os.path.dirname(self.path))
        return self._fd

    def append(self, kind: str, record: Mapping[str, Any] | None = None) -> None:
        """Append one record (``kind`` and ``record``'s keys, the time added) and make it
        durable before returning."""
        line = encode({"time": round(self.clock(), 6), "kind": kind, **(record or {})})
        try:
            if self._fd is not None and self._size + len(line) > self.max_bytes // 2:
                self._rotate()
            fd = self._open()
            os.write(fd, line)  # O_APPEND: one write, whole or torn at the end only
            os.fdatasync(fd)
            self._size += len(line)
            self.error = None
        except OSError as err:
            self.error = f"{self.path}: {err.strerror or err}"

    def _rotate(self) -> None:
        """``events`` becomes ``events.1`` (the older one dropped); the next append begins a
        new ``events``."""
        self.close()
        os.replace(self.path, self.older)
        _sync_dir(os.path.dirname(self.path))

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def begin(directory: str, services: list[str], info: Mapping[str, Any]) -> History:
    """The history of a run whose state directory is ``directory``, its first record the
    run's start (``run``: pid, services, fabric, driver version, IMEX owner)."""
    history = History(directory)
    history.append("run", {"pid": os.getpid(), "services": services,
                           **{k: v for k, v in info.items()
                              if k in ("fabric", "driver_version", "imex_owner")}})
    return history


def _cut_torn_tail(fd: int) -> int:
    """Cut a torn last line (no newline at the end) off the file open as ``fd`` (read and
    append); its size after. A tail longer than any record (no newline in reach) is ended
    with a newline instead: a damaged line of its own, which the reader drops."""
    size = os.fstat(fd).st_size
    if size == 0:
        return 0
    back = min(size, MAX_RECORD + _HEAD + 1)
    tail = os.pread(fd, back, size - back)
    if tail.endswith(b"\n"):
        return size
    cut = tail.rfind(b"\n")
    if cut < 0 and back < size:
        os.write(fd, b"\n")
        os.fsync(fd)
        return size + 1
    keep = size - back + cut + 1
    os.ftruncate(fd, keep)
    os.fsync(fd)
    return keep


def _sync_dir(directory: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class Reading:
    """What :func:`read` found: the whole records, oldest first, and the lines dropped
    (torn or damaged)."""

    records: tuple[dict[str, Any], ...]
    damaged: int = 0


def read_file(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> Reading:
    """The records of one history file (its last ``max_bytes`` plus a record at most).
    OSError when it cannot be opened (FileNotFoundError when absent)."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        limit = max_bytes + MAX_RECORD + _HEAD
        start = max(0, size - limit)
        fh.seek(start)
        data = fh.read(limit)
    return parse(data, middle=bool(start))


class _Chunks(Protocol):
    def read1(self, size: int = -1, /) -> bytes: ...


def read_stream(stream: _Chunks, max_bytes: int = DEFAULT_MAX_BYTES) -> Reading:
    """The records of a history read from ``stream`` (stdin, a decompressed ``events.gz``:
    :func:`nvfabric.facts.textfile.decompressing`), its last ``max_bytes`` plus a record at
    most kept while it is read (memory bounded; time is the caller's bound)."""
    limit = max_bytes + MAX_RECORD + _HEAD
    kept = bytearray()
    middle = False
    while block := stream.read1(1 << 16):
        kept += block
        if len(kept) > limit:
            del kept[:len(kept) - limit]
            middle = True
    return parse(bytes(kept), middle=middle)


def parse(data: bytes, middle: bool = False) -> Reading:
    """The records of a history's bytes (``middle``: ``data`` starts inside a line, which is
    skipped); what follows the last newline is a torn write, counted as damaged. Pure."""
    lines = data.split(b"\n")
    if middle:
        lines = lines[1:]
    torn = lines.pop() if lines else b""  # what follows the last newline: torn or empty
    records, damaged = [], int(bool(torn))
    for line in lines:
        record = decode(line)
        if record is None:
            damaged += bool(line)
        else:
            records.append(record)
    return Reading(tuple(records), damaged)


def read(directory: str, max_bytes: int = DEFAULT_MAX_BYTES) -> Reading:
    """The history of the state directory ``directory`` (``events.1`` then ``events``).
    FileNotFoundError when neither exists."""
    parts: list[Reading] = []
    for name in (OLDER, NAME):
        with contextlib.suppress(FileNotFoundError):
            parts.append(read_file(os.path.join(directory, name), max_bytes))
    if not parts:
        raise FileNotFoundError(2, "no event history", os.path.join(directory, NAME))
    return Reading(tuple(r for p in parts for r in p.records), sum(p.damaged for p in parts))


def select(records: Iterable[Mapping[str, Any]], *, since: float | None = None,
           code: str | None = None, kind: str | None = None) -> Iterator[Mapping[str, Any]]:
    """The records at or after ``since`` (seconds since the epoch), of finding ``code`` and
    of ``kind``, each filter only when given. Pure."""
    for r in records:
        t = r.get("time")
        if since is not None and not (isinstance(t, int | float) and t >= since):
            continue
        if code is not None and r.get("code") != code:
            continue
        if kind is not None and r.get("kind") != kind:
            continue
        yield r


#: The record kinds that carry a finding (as ``Finding.to_json`` gave it).
FINDING_KINDS = frozenset({"exit", "failure", "finding", "dropped", "kernel"})


def as_finding(record: Mapping[str, Any]) -> Finding | None:
    """The finding a record holds (kinds of :data:`FINDING_KINDS`), None for another record
    or one whose code or severity nvfabric does not know (a newer nvfabric wrote it)."""
    code, severity = record.get("code"), record.get("severity")
    if record.get("kind") not in FINDING_KINDS or not is_code(code) or not is_severity(severity):
        return None
    fields = {k: v for k, v in record.items()
              if k not in ("code", "severity", "message", "hint", "kind")}
    return Finding(code, severity, str(record.get("message", "")), str(record.get("hint", "")),
                   fields)


def for_diagnosis(records: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[Finding]]:
    """What ``doctor`` and ``triage`` take from a history: the kernel lines of its ``kernel``
    records (classified again with the caller's fabric kind, as if read from the log) and the
    findings of its other records, as recorded."""
    lines: list[str] = []
    found: list[Finding] = []
    for r in records:
        if r.get("kind") == "kernel" and isinstance(r.get("line"), str):
            lines.append(str(r["line"]))
        elif (f := as_finding(r)) is not None and r.get("kind") != "kernel":
            found.append(f)
    return lines, found
