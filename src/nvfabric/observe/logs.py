"""The log lines of ``nvfabric run``: text with an RFC 3339 timestamp, or JSON objects.

A line keeps the shape it always had (``nvfabric: <event>`` for nvfabric's own, ``<service>:
<line>`` for a daemon's, ``nvfabric: <severity> <code>: <message> (hint: ...)`` for a finding)
and gets an RFC 3339 timestamp in UTC with milliseconds in front
(``2026-12-01T11:40:00.123Z nvfabric: fabric ready in 3.2 s``; RFC 3339 section 5.6).
``--log-format json`` writes one JSON object per line instead, for Loki or Elastic:
``{"time", "level", "source", "message", "code"}`` where ``source`` is ``nvfabric`` or the
service (``nvlsm``, ``fabricmanager``, ``imex``, ``gpu-reset``), ``level`` ``info``,
``warning`` or ``error`` (a finding's severity), ``code`` the finding code or null.

Text lines are written here directly (:class:`LineWriter`); JSON lines go through the standard
:mod:`logging` module (:mod:`nvfabric.observe.logjson`, imported at the first JSON line), so
that the lean supervisor process of a text run holds neither :mod:`logging` nor
:mod:`datetime` (issue 15: its idle resident memory).

The structure is read back from the line's own text (:func:`parse`), so every writer keeps
calling :class:`nvfabric.effects.log.Log` as before. Control characters are escaped in both
formats (the caller applies :func:`nvfabric.effects.log.printable` first).
"""

from __future__ import annotations

import contextlib
import re
import time
from typing import IO, TYPE_CHECKING, Literal, NamedTuple

from nvfabric.model.findings import CODES

if TYPE_CHECKING:
    import logging

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")

#: The :mod:`logging` levels of a line (the module's own numbers, without importing it).
INFO, WARNING, ERROR = 20, 30, 40

_format: LogFormat = "text"

#: ``source: rest``: a service name (lower case, digits, ``-``/``_``) then ``: ``.
_SOURCE = re.compile(r"([a-z][a-z0-9_-]{0,31}): ")
#: ``<severity> <code>: `` at the start of a finding's message (Log.finding).
_FINDING = re.compile(r"(info|warning|error) ([a-z0-9_]+): ")
_LEVELS = {"info": INFO, "warning": WARNING, "error": ERROR}


def set_format(fmt: LogFormat) -> None:
    """Choose the format of every log line from now on (``run --log-format``). ValueError for
    a word not in :data:`FORMATS`."""
    global _format
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    _format = fmt


def current_format() -> LogFormat:
    return _format


class Parts(NamedTuple):
    """One line taken apart: ``source`` (``nvfabric``, a service, or ``""`` for a line with
    no prefix such as the ``  | `` last lines of a service), ``message`` (the rest; for a
    finding what follows ``<severity> <code>: ``), ``level`` (a :mod:`logging` level:
    :data:`INFO`, :data:`WARNING`, :data:`ERROR`) and the finding ``code`` (None unless the
    line is a finding)."""

    source: str
    message: str
    level: int = INFO
    code: str | None = None


def parse(text: str) -> Parts:
    """The parts of one log line as nvfabric writes it (module docstring). Only a code of the
    catalogue (:data:`nvfabric.model.findings.CODES`) counts as a finding code."""
    m = _SOURCE.match(text)
    if m is None:
        return Parts("", text)
    source, rest = m.group(1), text[m.end():]
    f = _FINDING.match(rest) if source == "nvfabric" else None
    if f is not None and f.group(2) in CODES:
        return Parts(source, rest[f.end():], _LEVELS[f.group(1)], f.group(2))
    return Parts(source, rest)


def rfc3339(created: float) -> str:
    """A :func:`time.time` value as RFC 3339 UTC with milliseconds: ``2026-12-01T11:40:00.123Z``.
    The same text as ``datetime.fromtimestamp(created, timezone.utc).isoformat(timespec=
    "milliseconds")`` with ``Z`` for ``+00:00``: microseconds rounded half to even, then the
    milliseconds cut, not rounded."""
    whole = float(int(created))  # math.modf without math: the subtraction below is exact
    micros = round((created - whole) * 1e6)
    if micros >= 1_000_000:
        micros -= 1_000_000
        whole += 1
    elif micros < 0:
        micros += 1_000_000
        whole -= 1
    t = time.gmtime(int(whole))
    return (f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:"
            f"{t.tm_sec:02d}.{micros // 1000:03d}Z")


class LineWriter:
    """Writes each line on ``stream`` in the current format (:func:`set_format`, looked up
    at each line) and flushes at once. A write error (a closed or broken stderr) is dropped:
    logging must never end the supervisor."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self._json: logging.Logger | None = None

    def write(self, text: str) -> None:
        """One line (control characters already escaped by the caller)."""
        if _format == "json":
            if self._json is None:
                from nvfabric.observe.logjson import logger_for

                self._json = logger_for(self.stream)
            self._json.info("%s", text)
            return
        with contextlib.suppress(OSError, ValueError):
            self.stream.write(f"{rfc3339(time.time())} {text}\n")
            self.stream.flush()
