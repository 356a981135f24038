"""``--log-format json`` (and the text format) as :mod:`logging` formatters: the lines of
:mod:`nvfabric.observe.logs` through the standard logging module, for a JSON run's log and for
anyone who wants nvfabric's line format on a logger of their own. Imported only when a JSON
line is written, so that a text run's lean supervisor never loads :mod:`logging`."""

from __future__ import annotations

import contextlib
import json
import logging
from typing import IO

from nvfabric.observe.logs import parse, rfc3339


class TextFormatter(logging.Formatter):
    """``<RFC 3339 time> <the line as written>``."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{rfc3339(record.created)} {record.getMessage()}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line (:mod:`nvfabric.observe.logs`); non-ASCII kept as UTF-8."""

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


class _LineHandler(logging.Handler):
    """Writes each record as one JSON line on ``stream`` and flushes at once. A write error
    (a closed or broken stderr) is dropped: logging must never end the supervisor."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__()
        self.stream = stream
        self.setFormatter(JsonFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record)
        with contextlib.suppress(OSError, ValueError):
            self.stream.write(text + "\n")
            self.stream.flush()


def logger_for(stream: IO[str]) -> logging.Logger:
    """A logger writing JSON lines to ``stream`` only (not propagated to the root logger, so a
    library's logging configuration never doubles or reformats nvfabric's lines)."""
    logger = logging.Logger("nvfabric", logging.INFO)
    logger.propagate = False
    logger.addHandler(_LineHandler(stream))
    return logger
