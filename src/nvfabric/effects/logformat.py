"""nvfabric's log line format (:mod:`nvfabric.effects.log`) as :mod:`logging` formatters, for
anyone who wants nvfabric's lines on a logger of their own: :class:`TextFormatter` (``<RFC 3339
time> <the line as written>``) and :class:`JsonFormatter` (one JSON object a line, the shape
``--log-format json`` writes). nvfabric itself writes its lines without :mod:`logging`."""

from __future__ import annotations

import logging

from nvfabric.effects.log import json_line, rfc3339


class TextFormatter(logging.Formatter):
    """``<RFC 3339 time> <the line as written>``."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{rfc3339(record.created)} {record.getMessage()}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line (:func:`nvfabric.effects.log.json_line`); non-ASCII kept as
    UTF-8."""

    def format(self, record: logging.LogRecord) -> str:
        return json_line(record.getMessage(), record.created, record.levelno)
