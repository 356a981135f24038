"""The live kernel log reader (nvfabric.facts.kmsg): kmsg records as the kernel documents them
(one record per read, continuation lines, EPIPE on an overrun, the seq gap), a simulated node's
FIFO read as a stream (several records per write, a writer's close is no end, a 300 MB line
dropped in bounded memory), the journal's short-monotonic lines and its fallback process (which
dies with its reader)."""

from __future__ import annotations

import os
import select
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nvfabric.facts.kmsg import (
    MAX_RECORD,
    Batch,
    KernelLog,
    dmesg_line,
    open_kernel_log,
    parse_journal,
    parse_record,
)
from tests.conftest import REPO
from tests.runkit import sim, until

CORPUS = REPO / "tests/data/corpus/logs"


def _fifo_root(tmp_path: Path) -> Path:
    root = tmp_path / "node"
    (root / "dev").mkdir(parents=True)
    os.mkfifo(root / "dev/kmsg", 0o600)
    return root


def _read_all(klog: KernelLog, want_lines: int, bound: float = 30.0) -> Batch:
    """Read until ``want_lines`` lines came (waiting on the descriptor, bounded)."""
    data, lines, too_long = b"", 0, 0
    deadline = time.monotonic() + bound
    while lines < want_lines:
        left = deadline - time.monotonic()
        assert left > 0, f"only {lines} of {want_lines} lines came"
        select.select([klog.fd], [], [], left)
        b = klog.read(1 << 20)
        data, lines, too_long = data + b.data, lines + b.lines, too_long + b.too_long
    return Batch(data, lines, too_long=too_long)


def test_the_records_of_a_real_kmsg_capture_parse() -> None:
    # leptonai/gpud pkg/kmsg/testdata: raw /dev/kmsg records of a 4-NVSwitch node
    text = (CORPUS / "gpud-dev-kmsg-nvswitch-open-excerpt.txt").read_text()
    records = [parse_record(line) for line in text.splitlines()]
    assert records and all(r is not None for r in records)
    assert records[0] == (206764307, "nvidia-nvswitch2: open (major=510)")
    assert dmesg_line(206764307, "x") == "[  206.764307] x"


@pytest.mark.parametrize("line", [
    " SUBSYSTEM=pci", " DEVICE=+pci:0000:08:00.0", "no prefix here", "6,1;short header",
    "6,x,117,-;not a number", "6,1,99999999999999999999999,-;too many digits",
])
def test_continuation_and_damaged_lines_are_no_records(line: str) -> None:
    assert parse_record(line) is None


def test_newer_kernels_extra_header_fields_are_read() -> None:
    # 5.10+ may add a caller id after the flags: 6,seq,usec,flags,caller=T1;message
    assert parse_record("6,12,117984502,-,caller=T1;NVRM: hello\n") == (117984502, "NVRM: hello")


def test_journal_short_monotonic_lines() -> None:
    assert parse_journal("[  117.984502] kernel: NVRM: Xid (PCI:0000:1b:00): 74, x\n") == (
        117984502, "NVRM: Xid (PCI:0000:1b:00): 74, x")
    assert parse_journal("-- Boot 1a2b --") is None
    assert parse_journal("[abc] kernel: x") is None


def test_simulated_nodes_have_a_kmsg_fifo(tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    assert stat.S_ISFIFO(os.stat(root / "dev/kmsg").st_mode)


def test_a_fifo_is_read_as_a_stream_of_records_and_a_writer_close_is_no_end(
        tmp_path: Path) -> None:
    root = _fifo_root(tmp_path)
    klog, why = open_kernel_log(str(root))
    assert klog is not None and klog.source == "fifo", why
    try:
        with open(root / "dev/kmsg", "wb") as w:  # several records and a dictionary per write
            w.write(b"6,1,100,-;first\n SUBSYSTEM=pci\n6,2,200,-;sec")
            w.flush()
            time.sleep(0)
            w.write(b"ond\n")
        batch = _read_all(klog, 3)
        lines = batch.data.decode().splitlines()
        assert [klog.parse(x) for x in lines] == [(100, "first"), None, (200, "second")]
        assert not klog.read(1 << 20).ended  # the writer went away: no end of file
    finally:
        klog.close()


def test_a_300_mb_line_is_dropped_in_bounded_memory_and_the_next_record_kept(
        tmp_path: Path) -> None:
    root = _fifo_root(tmp_path)
    klog, _ = open_kernel_log(str(root))
    assert klog is not None
    chunk = b"x" * (1 << 20)

    def write() -> None:
        with open(root / "dev/kmsg", "wb") as w:
            w.write(b"6,1,1,-;")
            for _ in range(300):
                w.write(chunk)
            w.write(b"\n6,2,2,-;after the long one\n")

    t = threading.Thread(target=write)
    t.start()
    try:
        data, too_long, lines, most = b"", 0, 0, 0
        deadline = time.monotonic() + 60
        while b"after the long one" not in data:
            assert time.monotonic() < deadline
            select.select([klog.fd], [], [], 1)
            b = klog.read(1 << 20)
            data += b.data
            too_long += b.too_long
            lines += b.lines
            most = max(most, len(klog._partial))
        assert too_long == 1 and lines == 1
        assert data == b"6,2,2,-;after the long one\n"
        assert most <= MAX_RECORD  # never more than one record's worth held
    finally:
        t.join(60)
        klog.close()


def test_whole_long_lines_inside_one_block_are_dropped_and_counted(tmp_path: Path) -> None:
    klog = KernelLog(-1, "fifo", "test")
    block, dropped = klog._lines(b"6,1,1,-;a\n" + b"y" * (MAX_RECORD + 10) + b"\n6,2,2,-;b\n")
    assert dropped == 1 and block == b"6,1,1,-;a\n6,2,2,-;b\n"


class _Kmsg:
    """A kmsg descriptor as the kernel documents it: one record per read, EPIPE once where
    records were overwritten, EAGAIN when nothing is left."""

    def __init__(self, script: list[bytes | type[BaseException]]) -> None:
        self.script = list(script)

    def __call__(self, fd: int, size: int) -> bytes:
        assert size >= 8192  # smaller than CONSOLE_EXT_LOG_MAX would be EINVAL
        if not self.script:
            raise BlockingIOError
        item = self.script.pop(0)
        if isinstance(item, type):
            raise item()
        return item


def test_kmsg_overrun_epipe_resumes_and_counts_the_records_lost() -> None:
    read = _Kmsg([b"6,1,10,-;one\n SUBSYSTEM=x\n", b"6,2,20,-;two\n", BrokenPipeError,
                  b"6,10,100,-;ten\n", b"6,11,110,-;eleven\n"])
    klog = KernelLog(-1, "kmsg", "/dev/kmsg", read=read)
    batch = klog.read(1 << 20)
    assert batch.lines == 4 and batch.lost == 7 and batch.skipped == 0
    assert [klog.parse(x) for x in batch.data.decode().splitlines()] == [
        (10, "one"), (20, "two"), (100, "ten"), (110, "eleven")]  # dictionaries not kept


def test_kmsg_records_skipped_in_a_flood_are_counted_as_skipped(tmp_path: Path) -> None:
    path = tmp_path / "kmsg"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    try:
        read = _Kmsg([b"6,5,1,-;a\n"])
        klog = KernelLog(fd, "kmsg", str(path), read=read)
        assert klog.read(1 << 20).lines == 1
        klog.skip()
        read.script = [b"6,50,9,-;b\n"]
        batch = klog.read(1 << 20)
        assert batch.skipped == 44 and batch.lost == 0
    finally:
        os.close(fd)


def test_a_regular_file_is_no_kmsg_and_nothing_else_is_tried(tmp_path: Path) -> None:
    root = tmp_path / "node"
    (root / "dev").mkdir(parents=True)
    (root / "dev/kmsg").write_text("not a device\n")
    klog, why = open_kernel_log(str(root), "kmsg")
    assert klog is None and "not a character device" in why


def test_without_kmsg_or_journal_nothing_is_watched_and_why_is_said(tmp_path: Path) -> None:
    klog, why = open_kernel_log(str(tmp_path))
    assert klog is None
    assert "dev/kmsg" in why and "no journal under" in why


def test_the_journal_is_the_fallback_and_its_process_is_ended(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    root = tmp_path / "node"
    (root / "var/log/journal").mkdir(parents=True)  # no dev/kmsg: a container without it
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    args = tmp_path / "args"
    (bin_dir / "journalctl").write_text(
        "#!/bin/sh\n"
        f"echo \"$@\" > {args}\n"
        "echo '[  117.984502] kernel: NVRM: _fabricNotifyEvent: Unable to notify "
        "ImexSessionApi'\n"
        "exec sleep 60\n")
    (bin_dir / "journalctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    klog, why = open_kernel_log(str(root))
    assert klog is not None and klog.source == "journal", why
    pid = klog.pid
    assert pid is not None
    try:
        batch = _read_all(klog, 1)
        assert klog.parse(batch.data.decode()) == (
            117984502, "NVRM: _fabricNotifyEvent: Unable to notify ImexSessionApi")
        assert args.read_text().split() == [
            "-k", "-f", "-n", "0", "-o", "short-monotonic", "--no-hostname", "-q",
            "--directory", str(root / "var/log/journal")]
    finally:
        klog.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # ended and reaped


def _ended(pid: int) -> bool:
    """True when ``pid`` is gone or a zombie (ended, not yet collected by whoever adopted it)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat_line.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_the_journal_process_ends_with_a_reader_killed_by_sigkill(tmp_path: Path) -> None:
    """``journalctl -f`` writes only when the kernel does: without PR_SET_PDEATHSIG it would
    outlive a supervisor killed with SIGKILL until the next kernel line."""
    root = tmp_path / "node"
    (root / "var/log/journal").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "journalctl").write_text("#!/bin/sh\nexec sleep 600\n")
    (bin_dir / "journalctl").chmod(0o755)
    reader = ("import sys, time\nfrom nvfabric.facts.kmsg import open_kernel_log\n"
              "klog, why = open_kernel_log(sys.argv[1])\n"
              "print(klog.pid if klog else why, flush=True)\ntime.sleep(600)\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    child = subprocess.Popen([sys.executable, "-c", reader, str(root)], stdout=subprocess.PIPE,
                             env=env, text=True)
    journal = None
    try:
        assert child.stdout is not None
        answer = child.stdout.readline().strip()
        assert answer.isdigit(), answer
        journal = int(answer)
        assert not _ended(journal)
        child.kill()
        child.wait()
        until(lambda: _ended(journal), "journalctl ended with the reader that started it")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if journal is not None and not _ended(journal):
            os.kill(journal, 9)
