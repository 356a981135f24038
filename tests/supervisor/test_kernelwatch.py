"""The kernel log watch (nvfabric.supervisor.kernelwatch) on a fake clock, fed through a real
FIFO as a simulated node's dev/kmsg: a live line gives doctor's finding; what changes the
verdict per fabric kind; once per (code, device) per interval; the boot window of
link-training notices; a flood read in a bounded share of each second; the end of a source."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nvfabric.effects.log import Log
from nvfabric.facts.kmsg import KernelLog, dmesg_line, open_kernel_log
from nvfabric.model.findings import Finding
from nvfabric.model.vocab import FabricKind
from nvfabric.rules.catalogue import catalogue
from nvfabric.rules.diagnose import classify_lines
from nvfabric.supervisor.kernelwatch import KernelWatch, Settings, driver_loaded_usec
from nvfabric.supervisor.timers import Timers
from tests.runkit import TIMESTAMP

SXID_FATAL = ("nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 24007, Fatal, Link 60 Minion Link "
              "DLREQ interrupt")
#: Xid 149 NETIR_LINK_EVT sub-code 37: immediate action RESET_GPU (case D16's decoding)
XID_RESET = ("NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 "
             "(0x025001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)")
#: Xid 145 RLW_REMAP error status 1: XID_154_EVAL, the GPU stays in service
XID_EVAL = ("NVRM: Xid (PCI:0018:01:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 12 (0x00000000 "
            "0x00000001 0x00000000 0x00000000)")
IMEX_NOTIFY = "NVRM: _fabricNotifyEvent: Unable to notify ImexSessionApi"
RXDETECT = "NVRM: knvlinkUpdatePostRxDetectLinkMask_IMPL: Failed to update Rx Detect Link mask!"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Harness:
    """A watch on a FIFO, with the loop's doors faked: readable descriptors, timers on a fake
    clock, the unit's door for a verdict change, the history as a list."""

    def __init__(self, tmp_path: Path, fabric: FabricKind | None, **settings: Any) -> None:
        root = tmp_path / "node"
        (root / "dev").mkdir(parents=True)
        os.mkfifo(root / "dev/kmsg", 0o600)
        klog, _ = open_kernel_log(str(root))
        assert klog is not None
        self.klog: KernelLog = klog
        self.writer = os.open(root / "dev/kmsg", os.O_WRONLY | os.O_NONBLOCK)
        self.clock = Clock()
        self.timers = Timers(self.clock)
        self.out = io.StringIO()
        self.records: list[tuple[str, dict[str, Any]]] = []
        self.levels: list[tuple[str, str]] = []
        self.watched: dict[int, Callable[[], None]] = {}
        self.seq = 0
        self.watch = KernelWatch(klog, fabric, Log(self.out), Settings(**settings),
                                 record=lambda k, r: self.records.append((k, r)),
                                 clock=self.clock, wall=lambda: 1.8e9 + self.clock.t)
        self.watch.attach(self.watched.__setitem__, lambda fd: self.watched.pop(fd, None),
                          self.timers.at,
                          lambda f, level: self.levels.append((f.code, level)))

    def write(self, *messages: str, usec: int = 600_000_000) -> None:
        block = []
        for m in messages:
            self.seq += 1
            block.append(f"3,{self.seq},{usec},-;{m}\n")
        data = "".join(block).encode()
        while data:
            data = data[os.write(self.writer, data[:60000]):]
            self.drain()

    def drain(self) -> None:
        """What the loop does while the descriptor is watched and readable."""
        while self.klog.fd in self.watched:
            before = self.watch.lines
            self.watched[self.klog.fd]()
            if self.watch.lines == before:
                return

    def advance(self, seconds: float) -> None:
        self.clock.t += seconds
        self.timers.fire_due()

    def lines(self, pattern: str) -> list[str]:
        lines = [TIMESTAMP.sub("", x, count=1) for x in self.out.getvalue().splitlines()]
        return [x for x in lines if re.search(pattern, x)]

    def kinds(self) -> list[str]:
        return [k for k, _ in self.records]

    def close(self) -> None:
        self.watch.close()
        os.close(self.writer)


@pytest.fixture
def harness(tmp_path: Path) -> Any:
    made: list[Harness] = []

    def make(fabric: FabricKind | None, **settings: Any) -> Harness:
        h = Harness(tmp_path / str(len(made)), fabric, **settings)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def _comparable(f: Finding) -> dict[str, Any]:
    out = f.to_json()
    out.pop("count")
    return out


KERNEL_EXAMPLES = [e for s in catalogue() if s.id.startswith(("sxid", "xid", "driver-"))
                   for e in s.examples if not e.startswith(("kern ", "Mar ", "Feb "))]


@pytest.mark.parametrize("line", [SXID_FATAL, XID_RESET, XID_EVAL, IMEX_NOTIFY, RXDETECT,
                                  *KERNEL_EXAMPLES])
def test_a_live_line_gives_the_finding_doctor_gives_for_the_saved_dmesg_line(
        harness: Any, line: str) -> None:
    message = re.sub(r"^\[\s*\d+\.\d+\]\s*", "", line)
    h = harness("nvswitch", boot_window_s=0)
    h.write(message, usec=117_984_502)
    saved = classify_lines([dmesg_line(117_984_502, message)], "nvswitch")
    live = [k.finding for k in h.watch.keys.values()]
    assert saved and [_comparable(f) for f in live] == [_comparable(f) for f in saved]


@pytest.mark.parametrize(("fabric", "line", "level"), [
    ("nvswitch", SXID_FATAL, "unhealthy"),
    ("nvlink5", SXID_FATAL, "unhealthy"),
    ("mnnvl", SXID_FATAL, None),  # a tray's NVSwitches are on the switch trays
    ("nvlink5", XID_RESET, "unhealthy"),
    ("nvlink5", XID_EVAL, None),  # XID_154_EVAL: the GPU stays in service
    ("nvswitch", "NVRM: Xid (PCI:0000:1b:00): 74, pid=88120, name=torchrun, NVLink: fatal "
                 "error detected on link 6(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)", "degraded"),
    ("mnnvl", IMEX_NOTIFY, "degraded"),
    ("nvswitch", IMEX_NOTIFY, None),
])
def test_what_changes_the_verdict_by_fabric_kind(harness: Any, fabric: FabricKind, line: str,
                                                 level: str | None) -> None:
    h = harness(fabric)
    h.write(line)
    snap = h.watch.snapshot()
    assert snap.level == level
    assert [lv for _, lv in h.levels] == ([level] if level else [])
    assert ("verdict" in h.kinds()) == (level is not None)


def test_a_fatal_sxid_is_logged_once_per_device_per_interval_with_its_count(harness: Any) -> None:
    h = harness("nvswitch", interval_s=60)
    other = SXID_FATAL.replace("0000:08:00.0", "0000:86:00.0")
    h.write(*([SXID_FATAL] * 500 + [other] * 300))
    assert len(h.lines(r"error nvswitch_fatal_error")) == 2  # one per device
    assert len(h.lines(r"makes this node unhealthy")) == 1  # the verdict changed once
    assert h.levels == [("nvswitch_fatal_error", "unhealthy")]
    snap = h.watch.snapshot()
    assert dict(snap.counts) == {("nvswitch_fatal_error", "error"): 800}
    assert sorted((f.fields["device"], f.fields["count"]) for f in snap.findings) == [
        ("0000:08:00.0", 500), ("0000:86:00.0", 300)]
    h.advance(59)
    assert not h.lines(r"more in the last")
    h.advance(1)
    assert sorted(h.lines(r"more in the last")) == [
        "nvfabric: nvswitch_fatal_error on 0000:08:00.0: 499 more in the last 60 s (500 since "
        "the run started)",
        "nvfabric: nvswitch_fatal_error on 0000:86:00.0: 299 more in the last 60 s (300 since "
        "the run started)"]
    assert h.kinds().count("kernel") == 2 and h.kinds().count("kernel_repeat") == 2
    h.write(SXID_FATAL)  # in the interval after the count: counted for the next one
    assert len(h.lines(r"error nvswitch_fatal_error")) == 2
    h.advance(60)
    assert h.lines(r"08:00.0: 1 more in the last 60 s \(501 since")
    h.advance(60)  # a quiet interval: the next one is said in full again
    h.write(SXID_FATAL)
    assert len(h.lines(r"error nvswitch_fatal_error")) == 3


def test_a_steady_stream_of_repeats_is_said_every_interval(harness: Any) -> None:
    h = harness("mnnvl", interval_s=60)
    for _ in range(130):  # one line a second for 130 s
        h.write(IMEX_NOTIFY)
        h.advance(1)
    repeats = h.lines(r"imex_not_ready: \d+ more in the last 60 s")
    assert len(repeats) == 2 and len(h.lines(r"warning imex_not_ready")) == 1


def test_an_imex_notify_flood_is_one_finding_counted_once(harness: Any) -> None:
    h = harness("mnnvl", max_lines_per_s=1_000_000)
    h.write(*([IMEX_NOTIFY] * 20_000))
    assert len(h.lines(r"warning imex_not_ready")) == 1
    assert len(h.lines(r"makes this node degraded")) == 1
    assert h.levels == [("imex_not_ready", "degraded")]
    (f,) = h.watch.snapshot().findings
    assert f.code == "imex_not_ready" and f.fields["count"] == 20_000
    assert h.kinds().count("kernel") == 1 and h.kinds().count("verdict") == 1


def test_link_training_notices_of_the_boot_window_are_counted_not_raised(harness: Any) -> None:
    h = harness("nvswitch", boot_window_s=300, driver_loaded_usec=10_000_000)
    h.write(RXDETECT, RXDETECT, usec=200_000_000)  # 190 s after the driver loaded
    assert h.watch.held_back == 2 and not h.lines(r"nvlink_training_warning")
    assert "kernel" not in h.kinds()
    assert dict(h.watch.snapshot().counts) == {("nvlink_training_warning", "warning"): 2}
    # past the window: raised at once (the held-back ones reserved nothing)
    h.write(RXDETECT, usec=311_000_000)
    assert len(h.lines(r"warning nvlink_training_warning")) == 1
    assert h.kinds() == ["kernel"]
    # the driver is loaded again (no reboot): the window starts at its load line
    h.write("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC "
            "2024", usec=900_000_000)
    h.write(RXDETECT, usec=950_000_000)
    assert h.watch.held_back == 3


def test_the_boot_window_holds_back_link_training_only(harness: Any) -> None:
    h = harness("nvswitch", boot_window_s=300)
    h.write(SXID_FATAL, usec=5_000_000)
    assert h.watch.held_back == 0 and h.watch.snapshot().level == "unhealthy"


def test_a_flood_is_read_in_a_bounded_share_of_the_second_and_the_rest_counted(
        harness: Any) -> None:
    h = harness("nvswitch", max_lines_per_s=2000)
    noise = "usb 1-1: device descriptor read/64, error -71"
    h.write(*([noise] * 1000))
    assert h.klog.fd in h.watched
    # more than the second's share: the reading stops until the second is over
    block = "".join(f"3,{i},1,-;{noise}\n" for i in range(5000)).encode()
    os.write(h.writer, block[:60000])
    h.drain()
    assert h.klog.fd not in h.watched
    os.write(h.writer, block[60000:120000])  # queued meanwhile: skipped when it resumes
    h.advance(1.0)
    assert h.klog.fd in h.watched
    dropped = dict(h.watch.snapshot().dropped)
    assert dropped["flood"] > 0
    h.advance(60)
    (line,) = h.lines(r"warning kernel_log_dropped")
    assert "skipped in a flood" in line
    assert h.kinds()[-1] == "dropped"
    # lines after the flood are classified again
    h.write(SXID_FATAL)
    assert h.watch.snapshot().level == "unhealthy"


def test_findings_per_device_are_bounded(harness: Any) -> None:
    from nvfabric.supervisor import kernelwatch

    h = harness("nvswitch")
    lines = [SXID_FATAL.replace("0000:08:00.0", f"0000:{i // 256:02x}:{i % 256:02x}.0")
             for i in range(kernelwatch.MAX_KEYS + 50)]
    h.write(*lines)
    assert len(h.watch.keys) == kernelwatch.MAX_KEYS + 1  # the rest share the device "*"
    assert h.watch.keys[("nvswitch_fatal_error", "*")].total == 50


def test_the_closing_flush_says_what_was_not_said(harness: Any) -> None:
    h = harness("nvswitch")
    h.write(SXID_FATAL, SXID_FATAL)
    h.watch.close()
    assert h.lines(r"1 more in the last")
    h.watch.close = lambda: None  # closed already


def test_the_driver_load_time_is_the_module_age_taken_from_the_uptime(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/uptime").write_text("1000.50 3000.00\n")
    (tmp_path / "sys/module/nvidia").mkdir(parents=True)
    made = os.stat(tmp_path / "sys/module/nvidia").st_mtime
    assert driver_loaded_usec(str(tmp_path), now=lambda: made + 400.5) == 600_000_000
    assert driver_loaded_usec(str(tmp_path / "none")) == 0


def test_record_lines_that_are_not_classified_are_dropped_with_a_reason(harness: Any) -> None:
    """A kmsg record whose header does not parse and one holding a number no kernel prints
    are counted among the lines and said as dropped: the reasons add up to both (the first
    was counted and in no reason; the second ended the watch with LogValueError)."""
    h = harness("nvswitch")
    os.write(h.writer, f"3,x,600000000,-;{SXID_FATAL}\n".encode())  # seq is no number
    h.drain()
    h.write(SXID_FATAL.replace("24007", "9" * 25))
    h.write(SXID_FATAL)  # read on: the next record is classified
    snap = h.watch.snapshot()
    assert snap.lines == 3
    assert dict(snap.dropped) == {"malformed": 1, "bad_number": 1}
    assert snap.level == "unhealthy"
    h.advance(60)
    (line,) = h.lines(r"warning kernel_log_dropped")
    assert "1 with a record header that does not parse" in line
    assert "1 holding a number no kernel prints" in line
