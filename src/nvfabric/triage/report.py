"""The layout of ``nvidia-bug-report.log.gz``: reading it as a stream and cutting it into
sections. No interpretation beyond naming each section.

Layout (the script ships with the driver as ``nvidia-bug-report.sh``; its text is public, e.g.
the R570-era copy vendored by bottlerocket-os/bottlerocket-admin-container):

- Every block starts with a line of 44 underscores and an empty line. The next line names the
  block: ``*** /path`` for a file (``append``: then ``*** ls: <ls -l line>`` and the file's
  text; ``*** /path does not exist`` / ``is not readable`` when it could not be read), the
  command as run with its full path for a command (``/usr/bin/lspci -nnDvvvxxxx``, then an
  empty line and its output), or a title (``dmesg:``, ``Scanning kernel log files for NVIDIA
  kernel messages:``, ``Collecting NVLink Subnet Manager (NVLSM) information...``).
- A part the script could not collect is its own block: ``Skipping: <what>`` and a reason
  line (``report_skip``); ``Error: <what>`` likewise (``report_and_store_error``).
- Some blocks hold several commands one after another, each an ``report_command`` (command
  line, empty line, output, empty line): the nvidia-smi block (``--query``, ``--query --unit``,
  ``nvlink --errorcounters``, ``nvlink --remotelinkinfo``, ``nvlink --status``, ``conf-compute``),
  the InfiniBand block (``ibstat``, then per device ``Running InfiniBand commands for device:
  X`` with ``ibnetdiscover``/``ibswitches``/``iblinkinfo -C X``), the NVLSM block
  (``nvlsm-bug-report.sh --stdout``). Those commands start sub-sections here.
- The first block is the prologue (``Start of NVIDIA bug report log file.``, script version,
  ``Date:``, ``uname:``, then the software versions table); the last is ``End of NVIDIA bug
  report log file.``: a report without it was cut short.
- Each block is written by its own ``gzip -c >>``, so the file is a sequence of gzip members;
  without gzip the script writes plain text. Older script versions lack blocks (no ibstat, no
  NVLSM, no IMEX), so nothing here expects any block to be present.

:func:`split` reads decompressed data in blocks of :data:`BLOCK` bytes and hands each section's
bytes (whole lines) to the handler its :class:`Section` asks for, so memory stays bounded by
the block size whatever the report's size. Truncation (a gzip member cut short, a corrupt
member) ends the stream where the damage starts; what was read before counts.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Protocol, cast

from nvfabric.model.errors import InputError
from nvfabric.model.strict import is_uint

BLOCK = 1 << 20
#: The separator: the script prints 44 underscores; 40 or more on a line of their own count.
SEPARATOR = re.compile(rb"_{40,}[ \t\r]*")
#: Most section headers kept (a real report has a few hundred); later ones are counted, and
#: the last one replaces the last kept.
MAX_SECTIONS = 4096
#: Longest header line kept, and longest line carried between blocks.
MAX_HEADER = 4096
MAX_CARRY = 1 << 20
#: Most decompressed bytes read before the first block separator: nvidia-bug-report.sh prints
#: its first separator after a prologue of a few lines, so 64 MiB without one is no report
#: (an endless stream, ``/dev/zero`` through a pipe, a gzip bomb of NULs stops here).
MAX_BEFORE_FIRST_BLOCK = 64 << 20
#: Most decompressed bytes read in all: bounds the time on an endless stream or a gzip bomb
#: (the largest reports of 8-GPU nodes with their journals are a few hundred MiB).
MAX_REPORT_BYTES = 16 << 30


class ReportTooLarge(InputError):
    """The stream went past :data:`MAX_BEFORE_FIRST_BLOCK` without a block separator, or past
    :data:`MAX_REPORT_BYTES` in all; the message says which."""

#: Commands that start a sub-section inside a multi-command block (``report_command``),
#: after an optional directory: nvidia-smi subcommands, the InfiniBand tools, NVLSM's report.
SUBCOMMAND = re.compile(
    rb"(?m)^(?:/[^\s/]+)*/?(?:nvidia-smi(?: [-\w=,.]+)+|ibstat|ibnetdiscover -C \S+|"
    rb"ibswitches -C \S+|iblinkinfo -C \S+|nvlsm-bug-report\.sh --stdout)[ \t\r]*$"
    rb"|^Running InfiniBand commands for device: \S+[ \t\r]*$"
)

#: First line of the prologue and of the epilogue (nvidia-bug-report.sh).
PROLOGUE = "Start of NVIDIA bug report log file."
EPILOGUE = "End of NVIDIA bug report log file."


_RUN = b"_" * 40


def find_separator(data: bytes, pos: int) -> tuple[int, int] | None:
    """(start, end) of the first separator line at or after ``pos`` in ``data`` (whole lines;
    ``pos`` is a line start), ``end`` past its newline; None when there is none. A literal
    search for 40 underscores, then a check that they start a line of underscores only:
    linear in ``data``, much faster than a multi-line regular expression over megabytes."""
    i = data.find(_RUN, pos)
    while i >= 0:
        if i == pos or data[i - 1] == 0x0A:
            end = data.find(b"\n", i)
            end = len(data) if end < 0 else end
            if SEPARATOR.fullmatch(data, i, end):
                return i, min(end + 1, len(data))
            i = data.find(_RUN, end)
        else:
            i = data.find(_RUN, data.find(b"\n", i) + 1) if data.find(b"\n", i) >= 0 else -1
    return None


class Handler(Protocol):
    """Receives one section's bytes, whole lines, in order; :meth:`close` at its end."""

    def feed(self, data: bytes) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Section:
    """What a block's header line says it is.

    ``kind``: ``file`` (``*** /path``; ``status`` ``ok``, ``absent`` or ``unreadable``),
    ``command`` (``name`` is the command without its directory: ``lspci -nnDvvvxxxx``),
    ``skipped`` / ``error`` (``name`` is what was skipped, e.g. ``ibstat output``), ``title``
    (``dmesg:``, ``Scanning kernel log files ...``), ``prologue``, ``epilogue``, or ``empty``
    (a block with no text). ``header`` is the line as printed.
    """

    kind: str
    name: str
    header: str
    status: str = "ok"


_FILE = re.compile(r"^\*\*\* (/\S*)(?: (does not exist|is not readable))?\s*$")


def identify(header: str) -> Section:
    """Name a block from its first non-empty line (see the module docstring)."""
    line = header.strip()
    if not line:
        return Section("empty", "", header)
    m = _FILE.match(line)
    if m:
        status = {"does not exist": "absent", "is not readable": "unreadable"}.get(
            m.group(2) or "", "ok")
        return Section("file", m.group(1), header, status)
    for prefix, kind in (("Skipping: ", "skipped"), ("Error: ", "error")):
        if line.startswith(prefix):
            return Section(kind, line[len(prefix):].strip(), header, kind)
    if line.startswith(PROLOGUE[:20]):
        return Section("prologue", "prologue", header)
    if line.startswith(EPILOGUE[:18]):
        return Section("epilogue", "epilogue", header)
    if " " not in line and line.startswith(OLD_FILE_PREFIXES):
        # older scripts printed a file's path alone before its text (no ``*** ``)
        return Section("file", line, header)
    if line.startswith("/") or line.split(" ", 1)[0] in COMMAND_WORDS:
        return Section("command", _command_name(line), header)
    return Section("title", line, header)


#: Where the files older scripts appended by bare path live (commands live in bin/sbin).
OLD_FILE_PREFIXES = ("/proc/", "/var/log/", "/etc/", "/sys/")

#: Commands the script echoes without a directory (``journalctl -b -0 ...``, ``ldd X``).
COMMAND_WORDS = frozenset({"journalctl", "ldd", "timeout", "systemctl", "lspci", "ibstat",
                           "nvidia-smi", "modinfo", "dmesg", "lsmod"})


def _command_name(line: str) -> str:
    """``/usr/bin/nvidia-smi --query`` -> ``nvidia-smi --query`` (directory dropped)."""
    first, _, rest = line.partition(" ")
    if first == "timeout" and is_uint(rest.split(" ", 1)[0]):
        return _command_name(rest.split(" ", 1)[1] if " " in rest else rest)
    base = first.rsplit("/", 1)[-1]
    return f"{base} {rest}".strip()


class Ignore:
    """A handler that drops what it is fed (a section nobody reads)."""

    def feed(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


IGNORE = Ignore()

#: Chooses the handler of a (sub-)section; ``parent`` is the enclosing block's section for a
#: sub-section, else None.
Router = Callable[[Section, "Section | None"], Handler]


@dataclass
class Outcome:
    """How reading went: ``bytes_read`` decompressed bytes, ``damage`` None or why the stream
    ended early (a gzip member cut short, a corrupt member), ``complete`` the epilogue was
    seen, ``sections`` how many block headers were seen (sub-sections included)."""

    bytes_read: int = 0
    damage: str | None = None
    complete: bool = False
    compressed: bool = False
    sections: int = 0


def open_stream(raw: IO[bytes]) -> tuple[IO[bytes], bool]:
    """The decompressed stream of ``raw`` (gzip, told by its magic bytes, or plain) and
    whether it was compressed. ``raw`` must support ``peek`` (a buffered reader)."""
    head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    if head == b"\x1f\x8b":
        return cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb")), True
    return raw, False


class Splitter:
    """Cuts a decompressed stream into sections and feeds each to its handler.

    State: the section being read and its handler, the enclosing multi-command block (for
    sub-sections), and whether the next non-empty line is a header.
    """

    def __init__(self, router: Router) -> None:
        self.router = router
        self.handler: Handler = IGNORE
        self.section: Section | None = None
        self.parent: Section | None = None
        self.awaiting_header = True
        self.sections: list[Section] = []
        self.count = 0
        self.complete = False

    def _start(self, section: Section, parent: Section | None) -> None:
        self.handler.close()
        self.section = section
        self.parent = parent
        self.count += 1
        if len(self.sections) < MAX_SECTIONS:
            self.sections.append(section)
        else:
            self.sections[-1] = section  # the last one is kept: it says where a cut came
        if section.kind == "epilogue":
            self.complete = True
        self.handler = self.router(section, parent)

    def _in_block(self) -> bool:
        """Whether sub-commands are recognised here: inside a block that runs several."""
        top = self.parent or self.section
        if top is None:
            return False
        return top.kind == "command" and bool(SUBCOMMAND.match(top.header.strip().encode())) \
            or top.kind == "title" and "NVLSM" in top.name

    def feed(self, data: bytes) -> None:
        """Whole lines of the report, in order."""
        pos = 0
        n = len(data)
        while pos < n:
            if self.awaiting_header:
                # skip empty lines, then take the header
                while pos < n:
                    end = data.find(b"\n", pos)
                    end = n if end < 0 else end + 1
                    line = data[pos:end]
                    if line.strip():
                        if SEPARATOR.fullmatch(line.rstrip(b"\n")):
                            pos = end
                            continue
                        header = line[:MAX_HEADER].decode("utf-8", "replace").rstrip("\r\n")
                        self.awaiting_header = False
                        self._start(identify(header), None)
                        pos = end
                        break
                    pos = end
                continue
            sep = find_separator(data, pos)
            stop = sep[0] if sep else n
            if self._in_block():
                pos = self._feed_block(data, pos, stop)
            else:
                if stop > pos:
                    self.handler.feed(data[pos:stop])
                pos = stop
            if sep:
                pos = sep[1]
                self.awaiting_header = True

    def _feed_block(self, data: bytes, pos: int, stop: int) -> int:
        """Feed ``data[pos:stop]`` inside a multi-command block, starting a sub-section at
        each command line."""
        while True:
            m = SUBCOMMAND.search(data, pos, stop)
            if m is None:
                if stop > pos:
                    self.handler.feed(data[pos:stop])
                return stop
            if m.start() > pos:
                self.handler.feed(data[pos:m.start()])
            header = m.group(0).decode("utf-8", "replace").rstrip("\r")
            parent = self.parent or self.section
            self._start(identify(header), parent)
            pos = min(m.end() + 1, stop)

    def close(self) -> None:
        self.handler.close()
        self.handler = IGNORE


def split(raw: IO[bytes], router: Router, block: int = BLOCK) -> tuple[list[Section], Outcome]:
    """Read a report (gzip or plain) from ``raw`` and route its sections. Never holds more
    than one block (plus one carried line of at most :data:`MAX_CARRY` bytes). Returns the
    section headers seen (at most :data:`MAX_SECTIONS`, the last always among them) and how
    the reading went; OSError from ``raw`` propagates; :class:`ReportTooLarge` past the size
    limits (an endless stream ends in bounded time)."""
    stream, compressed = open_stream(raw)
    outcome = Outcome(compressed=compressed)
    splitter = Splitter(router)
    carry = b""
    read = getattr(stream, "read1", stream.read)
    try:
        while True:
            # gather one block from as many gzip members as it takes; read1 returns at most
            # one member's worth, so what was decompressed before a damaged member is kept
            parts: list[bytes] = []
            size = 0
            ended = False
            while size < block:
                try:
                    chunk = read(block - size)
                except EOFError:
                    outcome.damage = "the gzip stream ends in the middle of a member (truncated)"
                    ended = True
                    break
                except (gzip.BadGzipFile, zlib.error) as err:
                    outcome.damage = f"the gzip stream is damaged ({err})"
                    ended = True
                    break
                if not chunk:
                    ended = True
                    break
                parts.append(chunk)
                size += len(chunk)
            if size:
                outcome.bytes_read += size
                if outcome.bytes_read > MAX_REPORT_BYTES:
                    raise ReportTooLarge(
                        f"more than {MAX_REPORT_BYTES >> 30} GiB of text, the limit for a report")
                if splitter.count == 0 and outcome.bytes_read > MAX_BEFORE_FIRST_BLOCK:
                    raise ReportTooLarge(
                        f"no block of nvidia-bug-report.sh in the first "
                        f"{MAX_BEFORE_FIRST_BLOCK >> 20} MiB: not an nvidia-bug-report log")
                data = carry + b"".join(parts)
                cut = data.rfind(b"\n")
                if cut < 0:
                    carry = data[:MAX_CARRY]
                else:
                    splitter.feed(data[: cut + 1])
                    carry = data[cut + 1:][:MAX_CARRY]
            if ended:
                break
        if carry:
            splitter.feed(carry + b"\n")
    finally:
        splitter.close()
    outcome.complete = splitter.complete
    outcome.sections = splitter.count
    return splitter.sections, outcome
