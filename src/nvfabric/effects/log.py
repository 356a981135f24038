"""nvfabric's log of a run: one line per event on stderr, control characters escaped, as text
with an RFC 3339 timestamp or as one JSON object a line.

:class:`Log` is what the supervisor and ``nvfabric run`` write their events with. A line keeps
the shape it always had (``nvfabric: <event>`` for nvfabric's own, ``<service>: <line>`` for a
daemon's, ``nvfabric: <severity> <code>: <message> (hint: ...)`` for a finding) and gets an RFC
3339 timestamp in UTC with milliseconds in front (``2026-12-01T11:40:00.123Z nvfabric: fabric
ready in 3.2 s``; RFC 3339 section 5.6). ``--log-format json`` writes one JSON object per line
instead, for Loki or Elastic: ``{"time", "level", "source", "message", "code"}`` where
``source`` is ``nvfabric`` or the service (``nvlsm``, ``fabricmanager``, ``imex``,
``gpu-reset``), ``level`` ``info``, ``warning`` or ``error`` (a finding's severity), ``code``
the finding code or null. Both formats are written here directly (:class:`LineWriter`), so
the lean supervisor process holds neither :mod:`logging` nor :mod:`datetime` (its idle
resident memory); :mod:`nvfabric.effects.logformat` gives the same lines as :mod:`logging`
formatters, for a logger of one's own.

The structure is read back from the line's own text (:func:`parse`), so every writer keeps
calling :class:`Log`. :func:`printable` is the escaping every plain-text line goes through.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from typing import IO, Literal, NamedTuple

from nvfabric.model.findings import CODES, Finding

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")

#: The :mod:`logging` levels of a line (the module's own numbers, without importing it).
INFO, WARNING, ERROR = 20, 30, 40
#: :mod:`logging`'s names of its levels, lower case (the JSON line's ``level``).
LEVEL_NAMES = {10: "debug", INFO: "info", WARNING: "warning", ERROR: "error", 50: "critical"}

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


def json_line(text: str, created: float, level: int = INFO) -> str:
    """The JSON object of one line (module docstring) written at ``created`` (a
    :func:`time.time` value); ``level``: the line's own when it is no finding."""
    parts = parse(text)
    return json.dumps({
        "time": rfc3339(created),
        "level": LEVEL_NAMES.get(lv := parts.level if parts.code else level, f"level {lv}"),
        "source": parts.source or "nvfabric",
        "message": parts.message,
        "code": parts.code,
    }, ensure_ascii=False)


class LineWriter:
    """Writes each line on ``stream`` in the current format (:func:`set_format`, looked up
    at each line) and flushes at once. A write error (a closed or broken stderr) is dropped:
    logging must never end the supervisor."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        """One line (control characters already escaped by the caller)."""
        now = time.time()
        line = json_line(text, now) if _format == "json" else f"{rfc3339(now)} {text}"
        with contextlib.suppress(OSError, ValueError):
            self.stream.write(line + "\n")
            self.stream.flush()


class Log:
    """nvfabric's log: one line per event on ``stream`` (stderr by default), flushed at once.
    nvfabric's own lines start with ``nvfabric: ``, a child's with its service name. Written
    with a timestamp, as text or JSON (:class:`LineWriter`)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self._out = LineWriter(self.stream)

    def line(self, text: str) -> None:
        """One line, control characters escaped (:func:`printable`): a daemon's output or a
        value read from the node never reaches the operator's terminal raw."""
        self._out.write(printable(text))

    def say(self, text: str) -> None:
        """One line of nvfabric's own: ``nvfabric: text``."""
        self.line("nvfabric: " + text)

    def finding(self, f: Finding) -> None:
        """A finding as one line: severity, code, message and its hint."""
        hint = f" (hint: {f.hint})" if f.hint else ""
        self.say(f"{f.severity} {f.code}: {f.message}{hint}")


def printable(text: str) -> str:
    """``text`` with C0 control characters (tab kept), DEL and C1 controls shown as ``\\xNN``:
    plain-text output (log lines, ``--dry-run`` listings) in which an escape sequence from a
    daemon or a config file would otherwise act on the terminal; a newline inside a value
    cannot split one log line into two. A byte that is not UTF-8 (a path given on the command
    line or read from a directory, which Python holds as a lone surrogate U+DC80-U+DCFF,
    PEP 383) is shown as ``\\xNN`` of that byte, so the result always encodes as UTF-8.
    Rich output uses :func:`nvfabric.cli.render.safe`."""
    if not any(_escaped(c) for c in text):
        return text
    return "".join(_escape(c) if _escaped(c) else c for c in text)


def _escaped(c: str) -> bool:
    """A character :func:`printable` shows as ``\\xNN`` (or ``\\uNNNN``)."""
    o = ord(c)
    return o < 32 and c != "\t" or 127 <= o < 160 or 0xD800 <= o < 0xE000


def _escape(c: str) -> str:
    """How :func:`printable` shows an escaped character: ``\\xNN`` of a control character or
    of the byte a surrogate escape stands for; ``\\uNNNN`` of another lone surrogate."""
    o = ord(c)
    if 0xDC80 <= o < 0xDD00:
        return f"\\x{o - 0xDC00:02x}"
    return f"\\u{o:04x}" if o >= 0xD800 else f"\\x{o:02x}"

