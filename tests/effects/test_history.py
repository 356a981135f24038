"""The event history (nvfabric.effects.history): framed, checksummed records that a torn
last write cannot corrupt (a kill -9 in the middle of appending keeps every record before),
two bounded files with the oldest dropped, the filters of `nvfabric events`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from nvfabric.effects import history
from nvfabric.effects.history import History, decode, encode, read, select
from tests import runkit


def test_a_record_is_one_framed_line_that_reads_back() -> None:
    line = encode({"time": 1.5, "kind": "kernel", "code": "nvswitch_fatal_error",
                   "message": "SXid ü"})
    assert line.startswith(b"NVFE1 ") and line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode(line) == {"time": 1.5, "kind": "kernel", "code": "nvswitch_fatal_error",
                            "message": "SXid ü"}


def test_a_damaged_byte_or_a_cut_line_is_no_record() -> None:
    line = encode({"time": 1, "kind": "run"})
    assert decode(line[:-5]) is None
    assert decode(line.replace(b'"run"', b'"rum"')) is None  # the CRC
    assert decode(b"NVFE1 zz") is None and decode(b"{}") is None


def test_an_oversized_record_is_cut_to_the_bound() -> None:
    line = encode({"time": 1, "kind": "exit", "code": "service_exited", "message": "m" * 20000,
                   "last_lines": ["x" * 5000] * 50})
    assert len(line) <= history.MAX_RECORD + 30
    got = decode(line)
    assert got is not None and got["cut"] and got["code"] == "service_exited"


def test_a_torn_last_write_is_dropped_the_rest_kept_and_the_writer_goes_on(
        tmp_path: Path) -> None:
    h = History(str(tmp_path), clock=lambda: 10.0)
    for i in range(5):
        h.append("kernel", {"n": i})
    h.close()
    path = tmp_path / "events"
    whole = path.read_bytes()
    path.write_bytes(whole + encode({"time": 11, "kind": "kernel", "n": 5})[:30])  # torn
    got = read(str(tmp_path))
    assert [r["n"] for r in got.records] == [0, 1, 2, 3, 4] and got.damaged == 1
    again = History(str(tmp_path), clock=lambda: 12.0)  # a new run: the torn tail is cut
    again.append("run", {"n": 6})
    got = read(str(tmp_path))
    assert [r["n"] for r in got.records] == [0, 1, 2, 3, 4, 6] and got.damaged == 0


def test_a_damaged_line_in_the_middle_is_dropped_and_counted(tmp_path: Path) -> None:
    lines = [encode({"time": i, "kind": "kernel", "n": i}) for i in range(3)]
    lines[1] = lines[1].replace(b'"n":1', b'"n":7')
    (tmp_path / "events").write_bytes(b"".join(lines))
    got = read(str(tmp_path))
    assert [r["n"] for r in got.records] == [0, 2] and got.damaged == 1


def test_the_history_is_bounded_and_drops_the_oldest(tmp_path: Path) -> None:
    h = History(str(tmp_path), max_bytes=64 << 10)
    for i in range(5000):
        h.append("kernel", {"n": i, "message": "x" * 100})
    h.close()
    size = sum(os.path.getsize(tmp_path / n) for n in ("events", "events.1"))
    assert size <= (64 << 10) + history.MAX_RECORD
    got = read(str(tmp_path), max_bytes=64 << 10)
    ns = [r["n"] for r in got.records]
    assert ns == list(range(ns[0], 5000)) and ns[0] > 0 and got.damaged == 0


#: A writer that appends records as fast as it can and says each one's number once append
#: returned (fdatasync done); killed with SIGKILL by the test at a moment of its choosing.
_WRITER = r"""
import sys
from nvfabric.effects.history import History
h = History(sys.argv[1], max_bytes=1 << 30)
i = 0
while True:
    h.append("kernel", {"n": i, "message": "NVSwitch fatal error " * (1 + i % 40)})
    sys.stdout.write(f"{i}\n")
    sys.stdout.flush()
    i += 1
"""


def test_kill_9_while_writing_keeps_every_record_before_the_last(tmp_path: Path) -> None:
    for round_ in range(3):
        where = tmp_path / str(round_)
        where.mkdir()
        child = subprocess.Popen([sys.executable, "-c", _WRITER, str(where)],
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        acked = -1
        try:
            for line in child.stdout:  # an event: the writer acknowledged that many records
                acked = int(line)
                if acked >= 200 + 150 * round_:
                    break
            child.send_signal(signal.SIGKILL)
        finally:
            child.kill()
            child.wait(runkit.BOUND_S)
        got = read(str(where), max_bytes=1 << 30)
        ns = [r["n"] for r in got.records]
        assert ns == list(range(len(ns))), "records lost or out of order"
        assert len(ns) - 1 >= acked  # every acknowledged one is there (maybe one more)
        assert got.damaged <= 1  # at most the torn last line
        h = History(str(where))
        h.append("run", {"n": "after"})
        assert read(str(where), max_bytes=1 << 30).records[-1]["n"] == "after"


def test_select_by_time_code_and_kind() -> None:
    records = [{"time": 10.0, "kind": "run"},
               {"time": 20.0, "kind": "kernel", "code": "nvswitch_fatal_error"},
               {"time": 30.0, "kind": "kernel", "code": "imex_not_ready"},
               {"time": "bad", "kind": "kernel", "code": "imex_not_ready"}]
    assert [r["time"] for r in select(records, since=20.0)] == [20.0, 30.0]
    assert [r["time"] for r in select(records, code="imex_not_ready")] == [30.0, "bad"]
    assert [r["time"] for r in select(records, kind="run")] == [10.0]


def test_findings_of_a_history_for_doctor_and_triage() -> None:
    records = [
        {"time": 1, "kind": "kernel", "code": "nvswitch_fatal_error", "severity": "error",
         "message": "m", "line": "[  1.000000] nvidia-nvswitch3: SXid (PCI:0000:08:00.0): "
         "24007, Fatal, Link 60"},
        {"time": 2, "kind": "exit", "code": "service_exited", "severity": "error",
         "message": "fabricmanager exited", "hint": "h", "service": "fabricmanager"},
        {"time": 3, "kind": "finding", "code": "no_such_code_yet", "severity": "error"},
        {"time": 4, "kind": "ready", "ready_after_s": 1.0},
    ]
    lines, found = history.for_diagnosis(records)
    assert lines == [records[0]["line"]]
    assert [(f.code, f.fields["service"]) for f in found] == [("service_exited", "fabricmanager")]
