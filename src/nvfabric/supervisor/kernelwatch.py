"""The kernel log, watched while ``nvfabric run`` supervises: every line the kernel writes
(:mod:`nvfabric.facts.kmsg`) goes through the diagnosis catalogue ``doctor`` uses
(:meth:`nvfabric.rules.diagnose.Classifier.match`, each record as the line ``dmesg`` prints
for it, so that a live line and the same line of a saved log give the same finding), and what
it finds is acted on by the rules of :mod:`nvfabric.rules.live`:

- a finding that changes the verdict (a fatal SXid on an NVSwitch node, an NVLink Xid whose
  immediate action is RESET_GPU, the driver's IMEX notify failures on a tray) raises the run's
  level: the unit is told (:meth:`nvfabric.supervisor.machine.Unit.on_kernel_finding`), the
  history gets a ``verdict`` record, ``/status`` and the metrics show it;
- every finding is logged once per (code, device) per ``interval_s`` seconds: the first at
  once, the repeats as one line with their count when the interval is over, never a line per
  kernel line; the same goes into the event history (:mod:`nvfabric.effects.history`);
- link-training notices in the first ``boot_window_s`` seconds after the driver loaded are
  counted, not raised (:func:`nvfabric.rules.live.debounced`); the window is measured in the
  kernel's own microseconds since boot, from the driver's load line when one is seen, else
  from what :func:`driver_loaded_usec` read at the start (or the boot);
- bounds: one wake-up reads at most :data:`READ_BUDGET` bytes and returns to the loop (the
  supervisor is never starved); more than ``max_lines_per_s`` lines in a second stop the
  reading for the rest of that second, and what came meanwhile is skipped (kmsg: seek to its
  end; a stream: read and thrown away) and counted, with the records the kernel overwrote
  (EPIPE), the lines too long to be records, and the record lines holding a fabric needle
  whose header does not parse or that carry a number no kernel prints: one
  ``kernel_log_dropped`` finding per interval says how many and why (the reasons add up to
  every such line). Memory is bounded by the catalogue (findings are kept per (code, device),
  at most :data:`MAX_KEYS`), not by the log.

Threads: everything runs in the supervisor's loop; :meth:`KernelWatch.snapshot` is a frozen
value, replaced whole, that the HTTP thread reads (:mod:`nvfabric.observe.serve`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from nvfabric.effects.log import Log
from nvfabric.facts.kmsg import Batch, KernelLog, dmesg_line, open_kernel_log
from nvfabric.model.commandline import HintContext
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import under
from nvfabric.model.strict import to_float
from nvfabric.model.vocab import FabricKind
from nvfabric.model.words import seconds
from nvfabric.rules.diagnose import Classifier, LogValueError
from nvfabric.rules.live import (
    DEFAULT_BOOT_WINDOW_S,
    DEFAULT_INTERVAL_S,
    DEFAULT_MAX_LINES_PER_S,
    DRIVER_LOAD,
    RANK,
    debounced,
    device_of,
    level_of,
    unreadable,
)
from nvfabric.rules.logtext import needle_lines

#: Bytes one wake-up reads at most before the loop serves the others.
READ_BUDGET = 256 << 10
#: Distinct (code, device) keys kept; beyond, a code's findings share the device ``*``.
MAX_KEYS = 256
#: Seconds before the journal's stream is started again when journalctl ended.
REOPEN_S = 5.0
#: Why kernel log lines were not classified (``dropped``'s keys), in the finding's words;
#: ``flood`` names the option's limit where it is said.
DROPPED_WORDS = {
    "flood": "skipped in a flood",
    "overrun": "overwritten by the kernel before they were read",
    "too_long": "longer than a kernel record",
    "malformed": "with a record header that does not parse (priority,seq,usec,flags;message)",
    "bad_number": "holding a number no kernel prints (more than 20 digits)",
}

Record = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class KernelEvents:
    """What the watch has seen since the run started, for ``/status`` and the metrics.
    ``counts``: ((code, severity), n) of every finding, held back or raised;
    ``last_event_time``: seconds since the epoch of the last finding (None: none yet);
    ``level``: the heaviest verdict a finding gave (None: none); ``findings``: the raised
    findings, the latest of each (code, device), with ``count``; ``dropped``: lines skipped by
    reason (:data:`DROPPED_WORDS`: ``flood``, ``overrun``, ``too_long``, ``malformed``,
    ``bad_number``); ``held_back``: link-training notices of
    the boot window."""

    source: str
    path: str
    lines: int = 0
    counts: tuple[tuple[tuple[str, str], int], ...] = ()
    last_event_time: float | None = None
    level: str | None = None
    findings: tuple[Finding, ...] = ()
    dropped: tuple[tuple[str, int], ...] = ()
    held_back: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "path": self.path, "lines": self.lines,
                "counts": [{"code": c, "severity": s, "count": n} for (c, s), n in self.counts],
                "last_event_time": self.last_event_time, "level": self.level,
                "findings": [f.to_json() for f in self.findings],
                "dropped": dict(self.dropped), "held_back": self.held_back}


@dataclass
class _Key:
    """One (code, device): the latest finding, when it was last logged (monotonic), the
    repeats since, all of them."""

    finding: Finding
    logged_at: float
    repeats: int = 0
    total: int = 1


@dataclass
class Settings:
    """The watch's options (``run``'s, through the job): see the module docstring."""

    boot_window_s: float = DEFAULT_BOOT_WINDOW_S
    interval_s: float = DEFAULT_INTERVAL_S
    max_lines_per_s: int = DEFAULT_MAX_LINES_PER_S
    driver_loaded_usec: int = 0


class KernelWatch:
    """Watches ``klog`` for a node of ``fabric`` (see the module docstring). ``clock``:
    monotonic seconds; ``wall``: seconds since the epoch (the records' and events' times);
    ``record``: the history's append (None: no history); ``reopen``: opens the source again
    when it ended (the journal), None when it cannot."""

    def __init__(self, klog: KernelLog, fabric: FabricKind | None, log: Log,
                 settings: Settings | None = None, *, record: Record | None = None,
                 reopen: Callable[[], KernelLog | None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 classifier: Classifier | None = None) -> None:
        self.klog = klog
        self.fabric = fabric
        self.log = log
        self.settings = settings or Settings()
        self.record = record
        self.reopen = reopen
        self.clock = clock
        self.wall = wall
        self.classifier = classifier or Classifier(fabric)
        self.scanners = (*self.classifier.scanners, DRIVER_LOAD.encode())
        self.driver_loaded_usec = self.settings.driver_loaded_usec
        self.lines = 0
        self.counts: dict[tuple[str, str], int] = {}
        self.keys: dict[tuple[str, str], _Key] = {}
        self.levels: dict[tuple[str, str], str] = {}
        self.dropped: dict[str, int] = {}
        self._dropped_said: dict[str, int] = {}
        self.held_back = 0
        self.last_event_time: float | None = None
        self._window_start = clock()
        self._window_lines = 0
        self._paused = False
        self._armed = False  # the look at the repeats is set
        self._level: str | None = None
        self._published = KernelEvents(klog.source, klog.path)
        # the loop's doors, given by attach()
        self._watch: Callable[[int, Callable[[], None]], None] | None = None
        self._unwatch: Callable[[int], None] | None = None
        self._at: Callable[[str, float, Callable[[], None]], None] | None = None
        self._on_level: Callable[[Finding, str], None] | None = None

    # ----------------------------------------------------------------- the loop's side

    def attach(self, watch: Callable[[int, Callable[[], None]], None],
               unwatch: Callable[[int], None],
               at: Callable[[str, float, Callable[[], None]], None],
               on_level: Callable[[Finding, str], None] | None) -> None:
        """Start watching: ``watch(fd, callback)`` / ``unwatch(fd)`` the loop's readable
        descriptors, ``at(tag, delay, callback)`` its timers, ``on_level(finding, level)``
        the unit's door for a finding that changes the verdict."""
        self._watch, self._unwatch, self._at, self._on_level = watch, unwatch, at, on_level
        watch(self.klog.fd, self.on_readable)
        self.log.say(f"watching the kernel log: {self.klog.source} {self.klog.path} (from its "
                     "end; fabric events are logged once per "
                     f"{seconds(self.settings.interval_s)} s per device, link-training "
                     f"notices held back {seconds(self.settings.boot_window_s)} s after the "
                     "driver loaded)")

    def on_readable(self) -> None:
        """The kernel log is readable: one budget of it, classified."""
        now = self.clock()
        if now - self._window_start >= 1.0:
            self._window_start, self._window_lines = now, 0
        batch = self.klog.read(READ_BUDGET)
        self.take(batch)
        if batch.ended:
            self._ended()
        elif self._window_lines > self.settings.max_lines_per_s and not self._paused:
            self._pause(now)

    def take(self, batch: Batch) -> None:
        """Count and classify one batch (what :meth:`on_readable` read)."""
        self._window_lines += batch.lines
        for reason, n in (("overrun", batch.lost), ("flood", batch.skipped),
                          ("too_long", batch.too_long)):
            if n:
                self._drop(reason, n)
        changed = bool(batch.lost or batch.skipped or batch.too_long)
        for line in needle_lines(batch.data, self.scanners):
            parsed = self.klog.parse(line)
            if parsed is None:
                if not line.startswith(" "):  # a continuation line belongs to its record
                    self._drop("malformed")  # a record line whose header does not parse
                    changed = True
                continue
            usec, message = parsed
            if message.startswith(DRIVER_LOAD) and usec is not None:
                self.driver_loaded_usec = usec  # a (re)loaded driver: the window again
            try:
                found = self.classifier.match(dmesg_line(usec, message))
            except LogValueError:  # a number no kernel prints: the line dropped, counted
                self._drop("bad_number")
                changed = True
                continue
            for f in found:
                self.finding(f, usec)
                changed = True
        if changed:
            self._publish()
        self.lines += batch.lines  # after: a snapshot that counts a line shows its finding

    def _drop(self, reason: str, n: int = 1) -> None:
        """``n`` lines not classified for ``reason`` (a key of :data:`DROPPED_WORDS`)."""
        self.dropped[reason] = self.dropped.get(reason, 0) + n
        self._due()

    def finding(self, f: Finding, usec: int | None) -> None:
        """One finding of one kernel line (see the module docstring)."""
        now = self.clock()
        count_key = (f.code, f.severity)
        self.counts[count_key] = self.counts.get(count_key, 0) + 1
        self.last_event_time = self.wall()
        s = self.settings
        if debounced(f, usec, self.driver_loaded_usec, s.boot_window_s):
            self.held_back += 1
            return
        device = device_of(f)
        key = (f.code, device)
        if key not in self.keys and len(self.keys) >= MAX_KEYS:
            key = (f.code, "*")
        held = self.keys.get(key)
        if held is None or now - held.logged_at >= s.interval_s:
            total = 1 if held is None else held.total + 1
            self.keys[key] = _Key(f, now, 0, total)
            self.log.finding(f)
            self._write("kernel", {**f.to_json(), "device": device})
            self._due()
        else:
            held.finding, held.repeats, held.total = f, held.repeats + 1, held.total + 1
            self._due()
        level = level_of(f, self.fabric)
        if level is not None:
            self._raise(key, f, level)

    def _raise(self, key: tuple[str, str], f: Finding, level: str) -> None:
        """A finding that changes the verdict: kept; when it makes the level heavier, the
        history records the change and the unit is told."""
        self.levels[key] = level
        if self._level is not None and RANK[level] <= RANK[self._level]:
            return
        before, self._level = self._level or "healthy", level
        self.log.say(f"the kernel log makes this node {level} (was {before}): {f.code}: "
                     f"{f.message}")
        self._write("verdict", {"verdict": level, "was": before, "code": f.code,
                                "severity": f.severity, "message": f.message,
                                "device": device_of(f)})
        if self._on_level is not None:
            self._on_level(f, level)

    # ----------------------------------------------------------------- the interval

    def _due(self, delay: float | None = None) -> None:
        """Arm the look at the repeats (once: a timer set again would move away under a
        steady stream of findings and never come)."""
        if self._at is not None and not self._armed:
            self._armed = True
            self._at("kernel-repeats", self.settings.interval_s if delay is None else delay,
                     self.flush)

    def flush(self, final: bool = False) -> None:
        """Say the repeats of each (code, device) whose interval is over (every one when
        ``final``), and the lines dropped since the last time; arm the next look."""
        now = self.clock()
        self._armed = False
        pending: float | None = None  # seconds until the next key's interval is over
        for (code, device), held in self.keys.items():
            if not held.repeats:
                continue
            left = held.logged_at + self.settings.interval_s - now
            if final or left <= 1e-6:
                where = f" on {device}" if device else ""
                self.log.say(f"{code}{where}: {held.repeats} more in the last "
                             f"{seconds(round(now - held.logged_at, 1))} s "
                             f"({held.total} since the run started)")
                self._write("kernel_repeat", {"code": code, "severity": held.finding.severity,
                                              "device": device, "count": held.repeats,
                                              "total": held.total,
                                              "message": held.finding.message})
                held.repeats, held.logged_at = 0, now
            else:
                pending = left if pending is None else min(pending, left)
        self._say_dropped()
        self._publish()
        if pending is not None and not final:
            self._due(pending)

    def _say_dropped(self) -> None:
        new = {r: n - self._dropped_said.get(r, 0) for r, n in self.dropped.items()
               if n > self._dropped_said.get(r, 0)}
        if not new:
            return
        self._dropped_said = dict(self.dropped)
        words = {**DROPPED_WORDS, "flood": f"skipped in a flood (more than "
                 f"{self.settings.max_lines_per_s:,} lines a second)"}
        f = Finding("kernel_log_dropped", "warning",
                    "kernel log lines not classified: " + "; ".join(
                        f"{n:,} {words[r]}" for r, n in sorted(new.items())),
                    "a fabric event in them was missed: read the whole log with `journalctl -k "
                    "| nvfabric doctor --log -`; a flood names its source in the lines around",
                    {"dropped": new, "dropped_total": dict(self.dropped)})
        self.log.finding(f)
        self._write("dropped", f.to_json())

    # ----------------------------------------------------------------- floods, the end

    def _pause(self, now: float) -> None:
        """A flood: stop reading for the rest of this second, then skip what came."""
        self._paused = True
        if self._unwatch is not None:
            self._unwatch(self.klog.fd)
        if self._at is not None:
            self._at("kernel-resume", max(0.0, 1.0 - (now - self._window_start)), self._resume)

    def _resume(self) -> None:
        self._paused = False
        thrown = self.klog.skip()
        if thrown:
            self.dropped["flood"] = self.dropped.get("flood", 0) + thrown
            self._publish()
        self._due()
        self._window_start, self._window_lines = self.clock(), 0
        if self._watch is not None:
            self._watch(self.klog.fd, self.on_readable)

    def _ended(self) -> None:
        """The source ended (journalctl exited): open it again in :data:`REOPEN_S`."""
        if self._unwatch is not None:
            self._unwatch(self.klog.fd)
        self.klog.close()
        self.log.say(f"the kernel log {self.klog.path} ended; opening it again in "
                     f"{seconds(REOPEN_S)} s")
        if self._at is not None and self.reopen is not None:
            self._at("kernel-reopen", REOPEN_S, self._again)

    def _again(self) -> None:
        assert self.reopen is not None
        klog = self.reopen()
        if klog is None:
            self.log.say(f"the kernel log cannot be opened again; trying in {seconds(REOPEN_S)} s")
            if self._at is not None:
                self._at("kernel-reopen", REOPEN_S, self._again)
            return
        self.klog = klog
        if self._watch is not None:
            self._watch(klog.fd, self.on_readable)

    def close(self) -> None:
        """The run ends: the repeats and drops not said yet are said, the log closed."""
        self.flush(final=True)
        if self._unwatch is not None and not self._paused:
            self._unwatch(self.klog.fd)
        self.klog.close()

    # ----------------------------------------------------------------- what is shown

    def _write(self, kind: str, record: dict[str, Any]) -> None:
        if self.record is not None:
            self.record(kind, record)

    def _publish(self) -> None:
        findings = tuple(
            replace(k.finding, fields={**k.finding.fields, "count": k.total, "device": device,
                                       **({"level": self.levels[(code, device)]}
                                          if (code, device) in self.levels else {})})
            for (code, device), k in self.keys.items())
        self._published = KernelEvents(
            self.klog.source, self.klog.path, self.lines, tuple(sorted(self.counts.items())),
            self.last_event_time, self._level, findings, tuple(sorted(self.dropped.items())),
            self.held_back)

    def snapshot(self) -> KernelEvents:
        """The events so far (any thread): a frozen value; ``lines`` is read now."""
        return replace(self._published, lines=self.lines)


def driver_loaded_usec(root: str, now: Callable[[], float] = time.time) -> int:
    """When the NVIDIA driver was loaded, in the kernel's microseconds since boot: the age of
    ``sys/module/nvidia`` (made when the module loaded) taken from the uptime
    (``proc/uptime``); 0 (the boot) when either cannot be read."""
    try:
        with open(under(root, "/proc/uptime"), encoding="ascii") as fh:
            uptime = to_float(fh.read(64).split()[0], what="uptime")
        made = os.stat(under(root, "/sys/module/nvidia")).st_mtime
    except (OSError, ValueError, IndexError):
        return 0
    return max(0, int((uptime - max(0.0, now() - made)) * 1e6))


def from_spec(spec: Mapping[str, Any], fabric: FabricKind | None, record: Record | None,
              hints: HintContext | None = None) -> KernelWatch | None:
    """The watch a run's options ask for (``spec``: ``root``, ``use`` auto/kmsg/journal and
    the :class:`Settings` by name; ``hints``: the node its findings' hints are typed for),
    shown by ``run --listen`` through the supervisor
    (:meth:`nvfabric.supervisor.supervise.Supervisor.kernel_events`). None when no kernel log
    can be read: said once as a ``kernel_log_unreadable`` finding (and recorded)."""
    root, use = str(spec.get("root", "/")), str(spec.get("use", "auto"))
    klog, why = open_kernel_log(root, use)
    if klog is None:
        f = unreadable(why)
        Log().finding(f)
        if record is not None:
            record("finding", f.to_json())
        return None
    settings = Settings(driver_loaded_usec=driver_loaded_usec(root),
                        **{k: spec[k] for k in ("boot_window_s", "interval_s", "max_lines_per_s")
                           if k in spec})
    return KernelWatch(klog, fabric, Log(), settings, record=record,
                       reopen=lambda: open_kernel_log(root, use)[0],
                       classifier=Classifier(fabric, hints=hints))
