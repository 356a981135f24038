"""The kernel log, live: ``/dev/kmsg`` under the root, read from its end, or the journal's
kernel stream where kmsg cannot be read (a container without it, ``dmesg_restrict`` and no
CAP_SYSLOG).

kmsg, as the kernel documents it (Documentation/ABI/testing/dev-kmsg):

- every read(2) returns one record, ``priority,seq,usec,flags[,more];message\\n`` and then
  continuation lines `` KEY=value\\n``; ``usec`` counts from boot, ``seq`` by one per record;
  non-printable bytes of the message are escaped as ``\\xHH`` (so a record is one line);
- lseek(fd, 0, SEEK_END) places the reader after the last record (we start there);
- a read buffer too small for the record fails with EINVAL (records are at most
  CONSOLE_EXT_LOG_MAX, 8 KiB; we read with :data:`READ_SIZE`);
- when records the reader had not read yet were overwritten (the ring buffer wrapped), read
  fails once with EPIPE and the next read returns the oldest record still there: the gap in
  ``seq`` is how many were lost. We resume and count them (:attr:`Batch.lost`).

A simulated node's ``dev/kmsg`` is a FIFO (``nvfabric simulate`` makes it) that tests and the
fakes write records to in the same format, several in one write: it is read as a stream, split
at newlines; the reader also holds the FIFO's write end so that it never sees an end of file
when a writer closes. The journal: ``journalctl -k -f -n 0 -o short-monotonic --no-hostname
-q`` (``--directory`` of the root's journal for another root), lines ``[  117.984502] kernel:
message``, started by the one door for a child whose output is read in the supervisor
(:func:`nvfabric.effects.process.spawn`: its own process group, PR_SET_PDEATHSIG, so that a
supervisor killed with SIGKILL leaves no ``journalctl -f`` behind; no :mod:`subprocess`).

Bounds: a read takes at most ``max_bytes`` (the caller's budget), a stream line longer than
:data:`MAX_RECORD` bytes is dropped and counted (:attr:`Batch.too_long`), never kept: a 300 MB
line costs 16 KiB of memory. Each line handed on is a complete record line ending in ``\\n``
(:meth:`KernelLog.parse` takes it apart), so the block can be scanned by the diagnosis
catalogue's needles before anything is decoded (:func:`nvfabric.rules.logtext.needle_lines`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
from dataclasses import dataclass
from typing import Literal

from nvfabric.effects.process import kill_group, spawn
from nvfabric.facts.fs import program_path
from nvfabric.model.hostpath import under
from nvfabric.model.strict import is_uint

#: The bytes asked of one read(2) of kmsg: twice CONSOLE_EXT_LOG_MAX (8 KiB), so that no
#: record fails with EINVAL.
READ_SIZE = 16384
#: The longest record line kept from a stream (a FIFO or the journal): a printk record is under
#: 1 KiB of text, 8 KiB with its dictionary; longer is not a kernel record.
MAX_RECORD = 16384
#: The journal, following the kernel's messages from now on, one line per record with the
#: time since boot as kmsg gives it (journalctl(1): -k, -f, -n 0, -o short-monotonic).
JOURNAL_ARGV = ("journalctl", "-k", "-f", "-n", "0", "-o", "short-monotonic", "--no-hostname",
                "-q")

Source = Literal["kmsg", "fifo", "journal"]


@dataclass(frozen=True)
class Batch:
    """What one read gave: ``data`` the complete record lines (each ending in ``\\n``),
    ``lines`` how many, ``lost`` records overwritten before they were read (EPIPE, or a
    ``seq`` gap), ``skipped`` records passed over on purpose (:meth:`KernelLog.skip`: their
    ``seq`` gap), ``too_long`` stream lines dropped for their length, ``more`` True when the
    budget ended the read (more may be queued), ``ended`` True when the source ended for good
    (the journal process exited)."""

    data: bytes
    lines: int
    lost: int = 0
    too_long: int = 0
    more: bool = False
    ended: bool = False
    skipped: int = 0


class KernelLog:
    """One open kernel log (see :func:`open_kernel_log`). ``fd`` is the descriptor to wait on
    (non-blocking, close-on-exec); ``source`` says what it is; ``path`` where (or the journal's
    command line). ``read`` is the read(2) to use (a test injects one)."""

    source: Source
    path: str

    def __init__(self, fd: int, source: Source, path: str, *, read: object = None,
                 keep: tuple[int, ...] = (), pid: int | None = None) -> None:
        self.fd = fd
        self.source = source
        self.path = path
        self._read = read if callable(read) else os.read
        self._keep = keep  # the FIFO's write end, held so that a writer's close is no EOF
        self.pid = pid  # the journal process
        self._seq: int | None = None  # the last kmsg record's seq
        self._skipped = False  # a skip happened: the next seq gap is ours, not an overrun
        self._partial = bytearray()
        self._discarding = False

    # ----------------------------------------------------------------- reading

    def read(self, max_bytes: int) -> Batch:
        """What is there now, at most ``max_bytes`` (then ``more``). Never blocks."""
        if self.source == "kmsg":
            return self._read_records(max_bytes)
        return self._read_stream(max_bytes)

    def _read_records(self, max_bytes: int) -> Batch:
        """kmsg: one record per read(2), until EAGAIN or the budget."""
        out: list[bytes] = []
        size = lost = skipped = 0
        while size < max_bytes:
            try:
                rec = self._read(self.fd, READ_SIZE)
            except BlockingIOError:
                return Batch(b"".join(out), len(out), lost, skipped=skipped)
            except BrokenPipeError:  # overwritten before we read them: resume, count below
                continue
            except OSError as err:
                if err.errno == errno.EINVAL:  # a record over READ_SIZE: kmsg never has one
                    self.skip()
                    continue
                raise
            if not rec:
                return Batch(b"".join(out), len(out), lost, ended=True, skipped=skipped)
            line = rec.split(b"\n", 1)[0] + b"\n"  # the continuation lines are not read
            seq = _seq(line)
            if seq is not None:
                if self._seq is not None and seq > self._seq + 1:
                    if self._skipped:
                        skipped += seq - self._seq - 1
                    else:
                        lost += seq - self._seq - 1
                self._seq = seq
                self._skipped = False
            out.append(line)
            size += len(line)
        return Batch(b"".join(out), len(out), lost, more=True, skipped=skipped)

    def _read_stream(self, max_bytes: int) -> Batch:
        """A FIFO or the journal's pipe: blocks split at newlines, long lines dropped."""
        chunks: list[bytes] = []
        lines = too_long = size = 0
        ended = more = False
        while True:
            if size >= max_bytes:
                more = True
                break
            try:
                data = self._read(self.fd, 65536)
            except BlockingIOError:
                break
            if not data:
                ended = True
                break
            size += len(data)
            block, dropped = self._lines(data)
            too_long += dropped
            if block:
                chunks.append(block)
                lines += block.count(b"\n")
        return Batch(b"".join(chunks), lines, 0, too_long, more, ended)

    def _lines(self, data: bytes) -> tuple[bytes, int]:
        """The complete lines of ``data`` after what was left of the last read, and how many
        were dropped for their length; the partial last line is kept (at most
        :data:`MAX_RECORD` bytes; a longer one is dropped and the rest of it skipped)."""
        cut = data.rfind(b"\n")
        if cut < 0:
            return b"", self._keep_partial(data)
        first = data.find(b"\n")
        head = b"" if self._discarding else bytes(self._partial) + data[:first + 1]
        dropped = 0 if self._discarding or len(head) <= MAX_RECORD + 1 else 1
        if dropped:
            head = b""
        self._partial.clear()
        self._discarding = False
        body = data[first + 1:cut + 1]
        if _has_long_line(body):
            kept = [ln for ln in body.split(b"\n")[:-1] if len(ln) <= MAX_RECORD]
            dropped += body.count(b"\n") - len(kept)
            body = b"".join(ln + b"\n" for ln in kept)
        dropped += self._keep_partial(data[cut + 1:])
        return head + body, dropped

    def _keep_partial(self, tail: bytes) -> int:
        """Keep ``tail`` (a line not ended yet) unless it grew past :data:`MAX_RECORD`: then
        it is dropped (1) and skipped up to its end."""
        if self._discarding or not tail:
            return 0
        if len(self._partial) + len(tail) > MAX_RECORD:
            self._partial.clear()
            self._discarding = True
            return 1
        self._partial += tail
        return 0

    def skip(self) -> int:
        """Drop what is queued now (a flood): kmsg seeks to its end (the records skipped show
        as the next read's ``seq`` gap), a stream is read and thrown away (at most 4 MiB a
        call). Returns the lines thrown away here (0 for kmsg: counted at the next read)."""
        if self.source == "kmsg":
            with contextlib.suppress(OSError):
                os.lseek(self.fd, 0, os.SEEK_END)
            self._skipped = True
            return 0
        thrown = 0
        for _ in range(64):
            try:
                data = self._read(self.fd, 65536)
            except BlockingIOError:
                break
            if not data:
                break
            thrown += data.count(b"\n")
        if thrown:
            self._partial.clear()
            self._discarding = False
        return thrown

    # ----------------------------------------------------------------- records

    def parse(self, line: str) -> tuple[int | None, str] | None:
        """One record line of :attr:`Batch.data` -> (microseconds since boot or None,
        message); None for a line that is no record (a continuation line, a journal line
        without the monotonic stamp)."""
        if self.source == "journal":
            return parse_journal(line)
        return parse_record(line)

    def close(self) -> None:
        """Close the descriptors; end the journal process (SIGTERM, reaped)."""
        for fd in (self.fd, *self._keep):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.pid is not None:
            kill_group(self.pid, signal.SIGTERM)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = None


def _has_long_line(block: bytes) -> bool:
    """True when ``block`` (lines ending in newlines) may hold a line over
    :data:`MAX_RECORD` bytes: some aligned window of half that size holds no newline (a longer
    line always covers one). A few C-level searches per block, never a loop over lines."""
    half = MAX_RECORD // 2
    if len(block) <= MAX_RECORD:
        return False
    return any(block.find(b"\n", i, i + half) < 0 for i in range(0, len(block) - half, half))


def _seq(line: bytes) -> int | None:
    head = line.split(b";", 1)[0].split(b",", 3)
    if len(head) >= 3:
        word = head[1].decode("ascii", "replace")
        if is_uint(word):
            return int(word)
    return None


def parse_record(line: str) -> tuple[int | None, str] | None:
    """A kmsg record line ``priority,seq,usec,flags[,...];message`` -> (usec, message); None
    for a continuation line (it starts with a blank) or a line without the prefix."""
    if not line or line[0] == " ":
        return None
    head, sep, message = line.partition(";")
    if not sep:
        return None
    fields = head.split(",", 4)
    if len(fields) < 4 or not all(is_uint(f) and len(f) <= 20 for f in fields[:3]):
        return None  # u64 counters: at most 20 digits
    return int(fields[2]), message.rstrip("\n")


def parse_journal(line: str) -> tuple[int | None, str] | None:
    """A ``journalctl -o short-monotonic --no-hostname`` line ``[  117.984502] kernel: text``
    -> (usec, text); None for another line (``-- Boot ... --`` markers)."""
    if not line.startswith("["):
        return None
    stamp, sep, rest = line[1:].partition("] ")
    secs, dot, micros = stamp.strip().partition(".")
    if not sep or not dot or not (is_uint(secs) and is_uint(micros)) or len(secs) > 12:
        return None
    rest = rest.rstrip("\n")
    _, colon, text = rest.partition(": ")
    return int(secs) * 1_000_000 + int(micros.ljust(6, "0")[:6]), text if colon else rest


def dmesg_line(usec: int | None, message: str) -> str:
    """The line ``dmesg`` prints for a record (``[  117.984502] message``; util-linux dmesg's
    ``[%5lu.%06lu]``): what a live record is classified as, so that it gives the same
    finding, timestamps included, as the same line in a saved ``dmesg`` log."""
    if usec is None:
        return message
    return f"[{usec // 1_000_000:5d}.{usec % 1_000_000:06d}] {message}"


def open_kernel_log(root: str, use: str = "auto") -> tuple[KernelLog | None, str]:
    """The kernel log of ``root``: its ``dev/kmsg`` (a character device: kmsg, from its end;
    a FIFO: a simulated node's), else (``use`` auto or journal) the journal's kernel stream.
    ``use``: ``auto``, ``kmsg`` or ``journal``. Returns (the log or None, what was tried and
    why it failed, for the finding)."""
    why = ""
    if use in ("auto", "kmsg"):
        log, why = _open_kmsg(root)
        if log is not None or use == "kmsg":
            return log, why
    log, why_journal = _open_journal(root)
    return log, "; ".join(w for w in (why, why_journal) if w)


def _open_kmsg(root: str) -> tuple[KernelLog | None, str]:
    path = under(root, "/dev/kmsg")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        return None, f"{path}: {err.strerror or err}"
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode):
            keep = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            return KernelLog(fd, "fifo", path, keep=(keep,)), ""
        if not stat.S_ISCHR(mode):
            os.close(fd)
            return None, f"{path}: not a character device"
        os.lseek(fd, 0, os.SEEK_END)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.close(fd)
        return None, f"{path}: {err.strerror or err}"
    return KernelLog(fd, "kmsg", path), ""


def _journal_argv(root: str) -> list[str] | None:
    if os.path.abspath(root) == "/":
        return list(JOURNAL_ARGV)
    directory = under(root, "/var/log/journal")
    if not os.path.isdir(directory):
        return None
    return [*JOURNAL_ARGV, "--directory", directory]


def _open_journal(root: str) -> tuple[KernelLog | None, str]:
    argv = _journal_argv(root)
    if argv is None:
        return None, f"no journal under {root} (var/log/journal)"
    program = program_path(argv[0])
    if program is None:
        return None, "journalctl: not found in $PATH"
    try:
        pid, fd = spawn([program, *argv[1:]], dict(os.environ))
    except OSError as err:
        return None, f"journalctl: {err.strerror or err}"
    return KernelLog(fd, "journal", " ".join(argv), pid=pid), ""
