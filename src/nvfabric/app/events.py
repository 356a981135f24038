"""``nvfabric events``: what happened to the fabric, from the event history of ``nvfabric
run`` (:mod:`nvfabric.effects.history`), live or after the run ended.

The procedure: find the history in the state directory under the root, read it (bounded;
torn or damaged lines dropped and counted), keep the records the filters select, and return
them as an :class:`Events` value; rendering is :mod:`nvfabric.cli.events`.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from nvfabric.effects import history
from nvfabric.model.errors import usage_error
from nvfabric.model.findings import is_code
from nvfabric.model.hostpath import under
from nvfabric.model.strict import BadValue, to_float

#: ``--since`` units (a bare number is seconds).
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,6})?)([smhd]?)")


@dataclass(frozen=True)
class Events:
    """The selected records (oldest first), where they were read, how many lines were
    dropped (torn or damaged) and how many records the history holds in all."""

    path: str
    records: tuple[dict[str, Any], ...]
    damaged: int
    total: int

    @property
    def exit_code(self) -> int:
        """1 when a selected record is an error finding, else 0."""
        return 1 if any(r.get("severity") == "error" for r in self.records) else 0

    def to_json(self) -> dict[str, Any]:
        return {"history": self.path, "total": self.total, "damaged": self.damaged,
                "events": list(self.records)}


def parse_since(text: str) -> float:
    """``--since`` as seconds: ``90``, ``90s``, ``10m``, ``2h``, ``1d``. Exit 2 otherwise."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise usage_error(f"--since {text!r}: not a duration",
                          "give a number with s, m, h or d, e.g. --since 10m")
    try:
        return to_float(m.group(1), what="--since") * _UNITS[m.group(2)]
    except BadValue as err:
        raise usage_error(str(err), "e.g. --since 10m") from None


def events(root: str, state_dir: str, since: str | None = None, code: str | None = None,
           now: float | None = None) -> Events:
    """The history of the run whose state directory is ``state_dir`` (under ``root``),
    selected by ``since`` (a duration back from ``now``) and finding ``code``. Exit 2 when
    there is no history or it cannot be read, or ``code`` is no finding code."""
    if code is not None and not is_code(code):
        raise usage_error(f"--code {code!r}: not a finding code",
                          "the finding codes are listed in docs/finding-codes.md")
    start = None if since is None else (time.time() if now is None else now) - parse_since(since)
    directory = under(root, state_dir)
    try:
        read = history.read(directory)
    except FileNotFoundError:
        raise usage_error(f"no event history in {directory} (no {history.NAME} file)",
                          "`nvfabric run` writes it there while it runs; give the --state-dir "
                          "that run was given") from None
    except OSError as err:
        raise usage_error(f"cannot read the event history in {directory}: "
                          f"{err.strerror or err}", "run as the user nvfabric run ran as") from None
    chosen = tuple(dict(r) for r in history.select(read.records, since=start, code=code))
    return Events(f"{directory}/{history.NAME}", chosen, read.damaged, len(read.records))
