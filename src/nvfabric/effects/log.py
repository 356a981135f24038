"""nvfabric's log of a run: one line per event on stderr, control characters escaped.

:class:`Log` is what the supervisor and ``nvfabric run`` write their events with (nvfabric's own
lines start with ``nvfabric: ``, a child's with its service name); :func:`printable` is the
escaping every plain-text line goes through.
"""

from __future__ import annotations

import sys
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from nvfabric.model.findings import Finding


class Log:
    """nvfabric's log: one line per event on ``stream`` (stderr by default), flushed at once.
    nvfabric's own lines start with ``nvfabric: ``, a child's with its service name. Written
    with a timestamp, as text or JSON (:mod:`nvfabric.observe.logs`)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        from nvfabric.observe.logs import LineWriter

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

