"""The log lines of ``nvfabric run``, through the standard :mod:`logging` module.

A line keeps the shape it always had (``nvfabric: <event>`` for nvfabric's own, ``<service>:
<line>`` for a daemon's, ``nvfabric: <severity> <code>: <message> (hint: ...)`` for a finding)
and gets an RFC 3339 timestamp in UTC with milliseconds in front
(``2026-12-01T11:40:00.123Z nvfabric: fabric ready in 3.2 s``; RFC 3339 section 5.6).
``--log-format json`` writes one JSON object per line instead, for Loki or Elastic:
``{"time", "level", "source", "message", "code"}`` where ``source`` is ``nvfabric`` or the
service (``nvlsm``, ``fabricmanager``, ``imex``, ``gpu-reset``), ``level`` ``info``,
``warning`` or ``error`` (a finding's severity), ``code`` the finding code or null.

The structure is read back from the line's own text (:func:`parse`), so every writer keeps
calling :class:`nvfabric.supervisor.Log` as before. Control characters are escaped in both
formats (the caller applies :func:`nvfabric.supervisor.printable` first).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import IO, Literal

from nvfabric.model.findings import CODES

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")

_format: LogFormat = "text"

#: ``source: rest``: a service name (lower case, digits, ``-``/``_``) then ``: ``.
_SOURCE = re.compile(r"([a-z][a-z0-9_-]{0,31}): ")
#: ``<severity> <code>: `` at the start of a finding's message (Log.finding).
_FINDING = re.compile(r"(info|warning|error) ([a-z0-9_]+): ")
_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def set_format(fmt: LogFormat) -> None:
    """Choose the format of every log line from now on (``run --log-format``). ValueError for
    a word not in :data:`FORMATS`."""
    global _format
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    _format = fmt


def current_format() -> LogFormat:
    return _format


@dataclass(frozen=True)
class Parts:
    """One line taken apart: ``source`` (``nvfabric``, a service, or ``""`` for a line with
    no prefix such as the ``  | `` last lines of a service), ``message`` (the rest; for a
    finding what follows ``<severity> <code>: ``), ``level`` (a :mod:`logging` level) and the
    finding ``code`` (None unless the line is a finding)."""

    source: str
    message: str
    level: int = logging.INFO
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
    """A :func:`time.time` value as RFC 3339 UTC with milliseconds: ``2026-12-01T11:40:00.123Z``."""
    stamp = datetime.fromtimestamp(created, timezone.utc).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


class TextFormatter(logging.Formatter):
    """``<RFC 3339 time> <the line as written>``."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{rfc3339(record.created)} {record.getMessage()}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line (module docstring); non-ASCII kept as UTF-8."""

    def format(self, record: logging.LogRecord) -> str:
        parts = parse(record.getMessage())
        level = parts.level if parts.code else record.levelno
        return json.dumps({
            "time": rfc3339(record.created),
            "level": logging.getLevelName(level).lower(),
            "source": parts.source or "nvfabric",
            "message": parts.message,
            "code": parts.code,
        }, ensure_ascii=False)


_FORMATTERS: dict[LogFormat, logging.Formatter] = {
    "text": TextFormatter(), "json": JsonFormatter()}


class _LineHandler(logging.Handler):
    """Writes each record as one line on ``stream`` and flushes at once. A write error (a
    closed or broken stderr) is dropped: logging must never end the supervisor."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__()
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        text = _FORMATTERS[_format].format(record)
        with contextlib.suppress(OSError, ValueError):
            self.stream.write(text + "\n")
            self.stream.flush()


def logger_for(stream: IO[str]) -> logging.Logger:
    """A logger writing to ``stream`` only (not propagated to the root logger, so a library's
    logging configuration never doubles or reformats nvfabric's lines)."""
    logger = logging.Logger("nvfabric", logging.INFO)
    logger.propagate = False
    logger.addHandler(_LineHandler(stream))
    return logger
