"""``systemctl status UNIT`` text -> the unit's state, as a bug report shows it. Pure.

What systemctl prints (systemd systemctl-show.c; captures tests/data/corpus/logs/
fm-590.48.01-systemctl-status-pre-nvl5-node-01.txt, bottlerocket-b200-fm-nvlsm-guid-systemctl-
status-kk142.txt): ``Loaded: loaded (/usr/lib/systemd/system/X.service; enabled; preset:
enabled)``, ``Active: active (running) since Tue 2026-03-03 18:39:19 MSK; 1h 4min ago``, the
``CGroup:`` tree whose leaves are ``└─5183 /usr/bin/nv-fabricmanager -c ...`` (one per
process), then the unit's last journal lines; ``Unit X.service could not be found.`` when it
is not installed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LOADED = re.compile(r"^\s*Loaded: (?P<load>\S+)(?: \((?P<detail>[^)]*)\))?")
_ACTIVE = re.compile(
    r"^\s*Active: (?P<active>\S+)(?: \((?P<sub>[^)]*)\))?(?: since [^;]*;(?P<ago> .*?) ago)?")
_PROCESS = re.compile(r"^\s*(?:[│├└─`|\\ -]+)(?P<pid>[0-9]{1,9}) (?P<cmd>/?\S.*?)\s*$")
_SPAN = re.compile(r"([0-9]{1,9})\s*(us|ms|s|sec|min|h|d|days?|w|weeks?|months?|y|years?)\b")
MAX_LINE = 4096
SPAN_S = {"us": 1e-6, "ms": 1e-3, "s": 1, "sec": 1, "min": 60, "h": 3600, "d": 86400,
          "day": 86400, "days": 86400, "w": 604800, "week": 604800, "weeks": 604800,
          "month": 2629800, "months": 2629800, "y": 31557600, "year": 31557600,
          "years": 31557600}


@dataclass(frozen=True)
class UnitState:
    """``installed`` False when systemctl could not find the unit; ``enabled`` the unit file
    state (None unknown); ``active`` / ``sub`` as printed (``active``/``running``,
    ``failed``/``failed``); ``age_s`` seconds since it entered that state (None unknown);
    ``processes`` the command lines of its cgroup."""

    installed: bool
    enabled: bool | None = None
    active: str | None = None
    sub: str | None = None
    age_s: float | None = None
    processes: tuple[str, ...] = ()

    @property
    def running(self) -> bool:
        return self.active == "active" and self.sub in (None, "running")


def timespan(text: str) -> float | None:
    """``1h 4min`` -> 3840.0 (systemd's format_timespan units); None when none is found."""
    parts = _SPAN.findall(text)
    if not parts:
        return None
    return float(sum(int(n) * SPAN_S[unit] for n, unit in parts))


def parse(text: str) -> UnitState:
    """The state of the first unit in the text."""
    if "could not be found" in text and "Loaded:" not in text:
        return UnitState(installed=False)
    enabled: bool | None = None
    active = sub = None
    age = None
    procs: list[str] = []
    in_cgroup = False
    for line in text.splitlines():
        if len(line) > MAX_LINE:  # a journal line of that length says nothing of the unit
            continue
        m = _LOADED.match(line)
        if m and enabled is None:
            if m.group("load") == "not-found":
                return UnitState(installed=False)
            words = [w.strip() for w in (m.group("detail") or "").split(";")]
            if len(words) > 1:
                enabled = words[1] in ("enabled", "enabled-runtime", "static", "alias")
            continue
        a = _ACTIVE.match(line)
        if a and active is None:
            active, sub = a.group("active"), a.group("sub")
            if a.group("ago"):
                age = timespan(a.group("ago"))
            continue
        stripped = line.strip()
        if stripped.startswith("CGroup:"):
            in_cgroup = True
            continue
        if in_cgroup:
            p = _PROCESS.match(line)
            if p:
                procs.append(p.group("cmd"))
            elif not stripped or not line[:1].isspace():
                in_cgroup = False
    if active is None and enabled is None:
        return UnitState(installed=False)
    return UnitState(True, enabled, active, sub, age, tuple(procs))
