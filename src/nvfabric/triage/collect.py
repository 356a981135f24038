"""Reading a bug report: which handler reads which section, and the facts they leave.

:func:`read` streams a report through :func:`nvfabric.triage.report.split` once and returns a
:class:`Collected`: the texts of the small sections (bounded), the lspci and ibstat parsers'
results, and per log section the findings of the diagnosis catalogue for every fabric kind
(the fabric kind is known only from the lspci section, which the script may not have written,
so each log is classified for each kind in one scan, and :mod:`nvfabric.triage.build` keeps
the right one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import IO

from nvfabric.model.findings import Finding
from nvfabric.model.vocab import FABRIC_KINDS
from nvfabric.rules.diagnose import Classifier
from nvfabric.rules.logtext import needle_lines
from nvfabric.triage.ibstat import IbstatParser
from nvfabric.triage.lspci import LspciParser
from nvfabric.triage.report import IGNORE, Handler, Outcome, Section, split

#: Most bytes kept of a section read as text (nvidia-smi --query of 8 GPUs is ~80 KB).
TEXT_CAP = 8 << 20
SMALL_CAP = 1 << 20
#: Most log sections classified (each keeps one classifier per fabric kind).
MAX_LOG_SECTIONS = 256
#: Most distinct daemon versions kept per component (a node runs one; a few after upgrades).
MAX_VERSIONS = 16

#: The sections triage reads, as (key, label): what the reader is told is missing.
EXPECTED: tuple[tuple[str, str], ...] = (
    ("lspci", "lspci -nnDvvvxxxx"),
    ("ibstat", "ibstat"),
    ("modules", "/proc/modules"),
    ("version", "/proc/driver/nvidia/version"),
    ("params", "/proc/driver/nvidia/params"),
    ("kernel", "NVIDIA kernel messages (kernel logs, journal)"),
    ("dmesg", "dmesg"),
    ("smi", "nvidia-smi --query"),
    ("fm_log", "/var/log/fabricmanager.log"),
    ("fm_status", "systemctl status nvidia-fabricmanager.service"),
    ("imex_log", "/var/log/nvidia-imex.log"),
    ("imex_status", "systemctl status nvidia-imex.service"),
    ("imex_ctl", "nvidia-imex-ctl -N"),
    ("nvlsm", "nvlsm-bug-report.sh --stdout"),
)

#: ``Skipping: X`` names -> the expected section it stands for.
SKIP_NAMES = {"lspci output": "lspci", "ibstat output": "ibstat",
              "Infiniband Commands": "ibstat", "nvidia-smi output": "smi",
              "nvidia-smi, vulkaninfo etc. Commands": "smi",
              "nvlsm-bug-report.sh output": "nvlsm"}

_VERSION_LINE = re.compile(
    rb"(?P<what>Fabric Manager|IMEX) version (?P<version>\d{3}\.\d{1,3}(?:\.\d{1,3})?) is running")
_KERNEL_SUB = re.compile(rb"(?m)^  (/\S+|journalctl -b -?\d+):[ \t\r]*$")


@dataclass
class LogResult:
    """One log section: its name, lines the catalogue could not classify (``skipped``),
    findings per fabric kind (None: unknown)."""

    name: str
    skipped: int = 0
    by_fabric: dict[str | None, list[Finding]] = field(default_factory=dict)


@dataclass
class Collected:
    """Everything read from one report (see the module docstring)."""

    sections: list[Section]
    outcome: Outcome
    texts: dict[str, str]
    text_truncated: set[str]
    lspci: LspciParser | None
    ibstat: IbstatParser | None
    logs: list[LogResult]
    seen: dict[str, str]
    skipped: dict[str, str]
    versions: dict[str, set[str]]
    in_use_sections: list[str]
    #: the key (of :data:`EXPECTED`) of the last section the report has, None when that
    #: section is none triage reads: in a report cut short, the one kept only in part
    last_key: str | None = None


class _Text:
    def __init__(self, store: dict[str, str], truncated: set[str], key: str, cap: int) -> None:
        self.store, self.truncated, self.key, self.cap = store, truncated, key, cap
        self.parts: list[bytes] = []
        self.size = 0

    def feed(self, data: bytes) -> None:
        room = self.cap - self.size
        if room <= 0:
            self.truncated.add(self.key)
            return
        if len(data) > room:
            self.truncated.add(self.key)
            data = data[:room]
        self.parts.append(data)
        self.size += len(data)

    def close(self) -> None:
        if self.key in self.store:  # a second block of the same kind: the first one counts
            return
        self.store[self.key] = b"".join(self.parts).decode("utf-8", "replace")


class _Lines:
    """Feeds a line parser (``line(str)``)."""

    def __init__(self, parser: LspciParser | IbstatParser) -> None:
        self.parser = parser

    def feed(self, data: bytes) -> None:
        for line in data.decode("utf-8", "replace").splitlines():
            self.parser.line(line)

    def close(self) -> None:
        pass


class _Log:
    """Classifies one log section for every fabric kind in one needle scan, and notes the
    daemons' version lines and whether IMEX failed with NV_ERR_IN_USE (the catalogue's
    ``imex_session_in_use``)."""

    def __init__(self, owner: _Reader, name: str) -> None:
        self.owner = owner
        self.result = LogResult(name)
        self.classifiers = {kind: Classifier(kind) for kind in (None, *FABRIC_KINDS)}
        self.scanners = self.classifiers[None].scanners
        owner.logs.append(self.result)

    def feed(self, data: bytes) -> None:
        for line in needle_lines(data, self.scanners):
            for c in self.classifiers.values():
                c.feed(line)  # a value no fabric log prints: the line dropped, counted
        if b" is running" in data:
            for m in _VERSION_LINE.finditer(data):
                what = "fabricmanager" if m.group("what") == b"Fabric Manager" else "imex"
                seen = self.owner.versions.setdefault(what, set())
                if len(seen) < MAX_VERSIONS:
                    seen.add(m.group("version").decode())

    def close(self) -> None:
        self.result.by_fabric = {k: c.findings() for k, c in self.classifiers.items()}
        self.result.skipped = max(sum(c.dropped.values()) for c in self.classifiers.values())
        if any(f.code == "imex_session_in_use" for f in self.result.by_fabric[None]):
            self.owner.in_use.append(self.result.name)  # NV_ERR_IN_USE: another IMEX owner


class _KernelLog:
    """The kernel messages block: one log per source it names (``  /var/log/kern.log:``,
    ``  journalctl -b -0:``)."""

    def __init__(self, owner: _Reader) -> None:
        self.owner = owner
        self.current: _Log | None = None

    def _log(self, source: str) -> _Log:
        if self.current is not None:
            self.current.close()
        self.current = self.owner.log(f"kernel messages ({source})")
        return self.current

    def feed(self, data: bytes) -> None:
        pos = 0
        for m in _KERNEL_SUB.finditer(data):
            if self.current is not None and m.start() > pos:
                self.current.feed(data[pos:m.start()])
            self._log(m.group(1).decode("utf-8", "replace"))
            pos = m.end() + 1
        if pos < len(data):
            (self.current or self._log("kernel log")).feed(data[pos:])

    def close(self) -> None:
        if self.current is not None:
            self.current.close()


class _Tee:
    def __init__(self, *handlers: Handler) -> None:
        self.handlers = handlers

    def feed(self, data: bytes) -> None:
        for h in self.handlers:
            h.feed(data)

    def close(self) -> None:
        for h in self.handlers:
            h.close()


class _SkipLs:
    """A file block: drops the ``*** ls: ...`` line that precedes the file's text."""

    def __init__(self, inner: Handler) -> None:
        self.inner = inner
        self.first = True

    def feed(self, data: bytes) -> None:
        if self.first:
            self.first = False
            if data.startswith(b"*** ls:"):
                cut = data.find(b"\n")
                data = b"" if cut < 0 else data[cut + 1:]
        if data:
            self.inner.feed(data)

    def close(self) -> None:
        self.inner.close()


class _Reader:
    """The router: chooses each section's handler and records what was seen."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        self.truncated: set[str] = set()
        self.lspci: LspciParser | None = None
        self.ibstat: IbstatParser | None = None
        self.logs: list[LogResult] = []
        self.seen: dict[str, str] = {}
        self.skipped: dict[str, str] = {}
        self.versions: dict[str, set[str]] = {}
        self.in_use: list[str] = []
        self.log_count = 0
        self.last_key: str | None = None

    def log(self, name: str) -> _Log:
        self.log_count += 1
        return _Log(self, name)

    def text(self, key: str, cap: int = SMALL_CAP) -> _Text:
        return _Text(self.texts, self.truncated, key, cap)

    def _see(self, key: str, status: str = "ok") -> None:
        self.last_key = key if status == "ok" else None
        if self.seen.get(key) != "ok":
            self.seen[key] = status

    def route(self, s: Section, parent: Section | None) -> Handler:
        self.last_key = None  # set again by _see when this section is one triage reads
        if s.kind == "prologue":
            return self.text("prologue")
        if s.kind in ("skipped", "error"):
            key = SKIP_NAMES.get(s.name)
            if key:
                self.skipped[key] = f"{s.kind}: {s.name}"
            return IGNORE
        if s.kind == "file":
            return self._file(s)
        if s.kind == "title":
            if s.name.startswith("Scanning kernel log files"):
                self._see("kernel")
                return _KernelLog(self) if self.log_count < MAX_LOG_SECTIONS else IGNORE
            if s.name.startswith("PCI devices configuration space dump using sysfs"):
                # the script's fallback without lspci: IDs, class and config hex per function
                self._see("lspci")
                self.lspci = self.lspci or LspciParser()
                return _Lines(self.lspci)
            if s.name == "dmesg:":
                self._see("dmesg")
                return self._log_or_ignore("dmesg")
            return IGNORE
        if s.kind == "command":
            return self._command(s.name)
        return IGNORE

    def _log_or_ignore(self, name: str) -> Handler:
        return self.log(name) if self.log_count < MAX_LOG_SECTIONS else IGNORE

    def _file(self, s: Section) -> Handler:
        keys = {"/proc/modules": "modules", "/proc/driver/nvidia/version": "version",
                "/proc/driver/nvidia/params": "params", "/proc/devices": "devices",
                "/var/log/fabricmanager.log": "fm_log", "/var/log/nvidia-imex.log": "imex_log",
                "/var/log/nvidia-imex-verbose.log": "imex_verbose"}
        path = s.name
        for prefix in ("/.bottlerocket/rootfs",):
            if path.startswith(prefix + "/"):
                path = path[len(prefix):]
        key = keys.get(path)
        if key is None:
            return IGNORE
        self._see(key, s.status)
        if s.status != "ok":
            return IGNORE
        if key in ("fm_log", "imex_log", "imex_verbose"):
            return _SkipLs(self._log_or_ignore(path))
        return _SkipLs(self.text(key))

    def _command(self, name: str) -> Handler:
        if name.startswith("lspci ") and "v" in name.split(" ", 1)[1] and "t" not in name:
            self._see("lspci")
            self.lspci = self.lspci or LspciParser()
            return _Lines(self.lspci)
        if name == "ibstat":
            self._see("ibstat")
            self.ibstat = self.ibstat or IbstatParser()
            return _Lines(self.ibstat)
        if name in ("nvidia-smi --query", "nvidia-smi -q"):  # -q: older scripts
            self._see("smi")
            # also a log: nvidia-smi's own failures ("couldn't communicate with the NVIDIA
            # driver") are lines of the diagnosis catalogue
            return _Tee(self.text("smi", TEXT_CAP), self._log_or_ignore(name))
        if name.startswith("systemctl status nvidia-fabricmanager"):
            self._see("fm_status")
            return _Tee(self.text("fm_status"), self._log_or_ignore(name))
        if name.startswith("systemctl status nvidia-imex"):
            self._see("imex_status")
            return _Tee(self.text("imex_status"), self._log_or_ignore(name))
        if name.startswith("nvidia-imex-ctl -N"):
            self._see("imex_ctl")
            return self.text("imex_ctl", TEXT_CAP)
        if name.startswith("nvlsm-bug-report.sh"):
            self._see("nvlsm")
            return self._log_or_ignore(name)
        if name.startswith("mst status"):
            return self.text("mst", SMALL_CAP)
        if name.startswith("journalctl "):
            return self._log_or_ignore(name)
        return IGNORE


def read(raw: IO[bytes]) -> Collected:
    """Stream one report (gzip or plain) from ``raw`` and collect what triage needs."""
    reader = _Reader()
    sections, outcome = split(raw, reader.route)
    return Collected(
        sections=sections, outcome=outcome, texts=reader.texts,
        text_truncated=reader.truncated, lspci=reader.lspci, ibstat=reader.ibstat,
        logs=reader.logs, seen=reader.seen, skipped=reader.skipped, versions=reader.versions,
        in_use_sections=reader.in_use, last_key=reader.last_key,
    )
