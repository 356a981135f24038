"""`nvfabric run` watching the kernel log of simulated nodes (their dev/kmsg FIFO) as real
processes: a fatal SXid, an NVLink Xid whose action is RESET_GPU and an IMEX notify flood each
change what the run reports (/status, /metrics, the log, the outcome, the event history); a
link-training notice of the boot window is only counted; --kernel-log off watches nothing."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.cli.test_status_prometheus import promtool_check, series
from tests.conftest import run_cli
from tests.httpkit import free_port, get, wait_status
from tests.runkit import Run, poll, sim

SXID_FATAL = ("nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 24007, Fatal, Link 60 Minion Link "
              "DLREQ interrupt")
XID_RESET = ("NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 "
             "(0x025001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)")
IMEX_NOTIFY = "NVRM: _fabricNotifyEvent: Unable to notify ImexSessionApi"
RXDETECT = "NVRM: knvlinkUpdatePostRxDetectLinkMask_IMPL: Failed to update Rx Detect Link mask!"


def kmsg(root: Path, *messages: str, usec: int = 3_600_000_000, first_seq: int = 1) -> None:
    """Write kernel records to the node's dev/kmsg (the run holds its read end open: it said
    it is watching it)."""
    data = "".join(f"3,{first_seq + i},{usec},-;{m}\n" for i, m in enumerate(messages))
    with open(root / "dev/kmsg", "wb") as fh:
        fh.write(data.encode())


def status(port: int) -> dict[str, Any]:
    doc = json.loads(get(port, "/status")[2])
    assert isinstance(doc, dict)
    return doc


def healthy(port: int) -> None:
    """Wait for the first reading to say healthy (the GPUs registered)."""
    poll(lambda: status(port) if get(port, "/status")[0] == 200 else {},
         lambda s: s.get("verdict") == "healthy", "a healthy /status")


def test_a_fatal_sxid_makes_a_running_nvswitch_node_unhealthy_at_once(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "hgx-h100")
    port = free_port()
    # a reading of the fabric every 60 s: what changes /status is the kernel line, not a read
    run = start(root, "--listen", f"127.0.0.1:{port}", "--health-interval", "60", "--json")
    run.wait_line(r"watching the kernel log: fifo .*/dev/kmsg")
    run.wait_line(r"fabric ready in")
    healthy(port)
    kmsg(root, *([SXID_FATAL] * 40))
    doc = poll(lambda: status(port), lambda s: s["verdict"] == "unhealthy", "unhealthy")
    sxid = [f for f in doc["findings"] if f["code"] == "nvswitch_fatal_error"]
    assert sxid and sxid[0]["level"] == "unhealthy" and sxid[0]["pci"] == "0000:08:00.0"
    assert doc["kernel"]["source"] == "fifo" and doc["kernel"]["level"] == "unhealthy"
    text = promtool_check(poll(lambda: get(port, "/metrics")[2],
                               lambda t: "nvswitch_fatal_error" in t, "the SXid in /metrics"))
    assert series(text, "nvfabric_verdict")['nvfabric_verdict{verdict="unhealthy"}'] == 1.0
    assert series(text, "nvfabric_kernel_events_total") == {
        'nvfabric_kernel_events_total{code="nvswitch_fatal_error",severity="error"}': 40.0}
    assert "nvfabric_kernel_last_event_timestamp_seconds" in text
    assert len(run.wait_count(r"error nvswitch_fatal_error", 1)) == 1
    run.signal(signal.SIGTERM)
    assert run.wait() == 0  # the daemons were never the problem: the run stops in order
    assert len([x for x in run.lines if "error nvswitch_fatal_error:" in x]) == 1
    assert any("39 more in the last" in x for x in run.lines)
    assert "nvswitch_fatal_error" in [f["code"] for f in run.result()["findings"]]
    # the history outlives the run
    events = json.loads(run_cli("events", "--root", str(root), "--json").stdout)["events"]
    kinds = [e["kind"] for e in events]
    assert kinds[:2] == ["run", "ready"] and "verdict" in kinds
    assert kinds[-2:] == ["kernel_repeat", "stop"]  # the repeats said before the end
    verdict = next(e for e in events if e["kind"] == "verdict")
    assert verdict["verdict"] == "unhealthy" and verdict["code"] == "nvswitch_fatal_error"


def test_an_nvlink_xid_whose_action_is_reset_gpu_makes_a_b200_unhealthy(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200")
    port = free_port()
    run = start(root, "--listen", f"127.0.0.1:{port}", "--health-interval", "1")
    run.wait_line(r"fabric ready in")
    healthy(port)
    kmsg(root, XID_RESET)
    doc = poll(lambda: status(port), lambda s: s["verdict"] == "unhealthy", "unhealthy")
    (xid,) = [f for f in doc["findings"] if f["code"] == "nvlink_xid_error"]
    assert xid["immediate_action"] == "RESET_GPU" and xid["xid"] == 149
    run.wait_line(r"the kernel log makes this node unhealthy \(was healthy\): nvlink_xid_error")
    run.signal(signal.SIGTERM)
    assert run.wait() == 0


def test_an_imex_notify_flood_on_a_tray_is_degraded_and_said_once(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "gb200-tray")
    port = free_port()
    run = start(root, "--listen", f"127.0.0.1:{port}", "--health-interval", "60")
    run.wait_line(r"fabric ready in")
    wait_status(port, "/status", 200)
    kmsg(root, *([IMEX_NOTIFY] * 5000))
    doc = poll(lambda: status(port), lambda s: s["kernel"]["lines"] >= 5000, "5000 lines")
    assert doc["verdict"] == "degraded" or doc["verdict"] == "unhealthy"
    assert doc["kernel"]["level"] == "degraded"
    (notify,) = [f for f in doc["findings"] if f["code"] == "imex_not_ready"
                 and f.get("level") == "degraded"]
    assert notify["count"] == 5000
    # typed for the run's root, and this run is who runs IMEX there
    assert f"nvfabric runs it (`nvfabric run --root {root}`)" in notify["hint"]
    assert f"`nvfabric imex owner --root {root}`" in notify["hint"]
    assert "DRA driver or Slurm" not in notify["hint"]
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    assert len([x for x in run.lines if "warning imex_not_ready:" in x]) == 1
    assert len([x for x in run.lines if "makes this node degraded" in x]) == 1


def test_the_lean_supervisor_watches_too_and_the_outcome_keeps_the_finding(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "hgx-h100")
    run = start(root, "--json")  # no --listen: the lean process supervises
    run.wait_line(r"fabric ready in")
    run.wait_line(r"watching the kernel log")
    kmsg(root, SXID_FATAL)
    run.wait_line(r"the kernel log makes this node unhealthy")
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    result = run.result()
    (sxid,) = [f for f in result["findings"] if f["code"] == "nvswitch_fatal_error"]
    assert sxid["pci"] == "0000:08:00.0"
    assert f"`nvidia-bug-report.sh` on the host whose root {root} is" in sxid["hint"]


def test_a_link_training_notice_in_the_boot_window_is_counted_not_raised(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200")
    port = free_port()
    run = start(root, "--listen", f"127.0.0.1:{port}", "--link-training-window", "600")
    run.wait_line(r"fabric ready in")
    wait_status(port, "/status", 200)
    kmsg(root, RXDETECT, usec=30_000_000)  # 30 s after boot, the driver's load unknown
    doc = poll(lambda: status(port), lambda s: s["kernel"]["held_back"] == 1, "held back")
    assert not [f for f in doc["findings"] if f["code"] == "nvlink_training_warning"]
    kmsg(root, RXDETECT, usec=700_000_000, first_seq=2)
    doc = poll(lambda: status(port), lambda s: any(
        f["code"] == "nvlink_training_warning" for f in s["findings"]), "raised")
    assert doc["kernel"]["counts"] == [
        {"code": "nvlink_training_warning", "severity": "warning", "count": 2}]
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    assert len([x for x in run.lines if "warning nvlink_training_warning" in x]) == 1


def test_kernel_log_off_watches_nothing(tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "hgx-h100")
    run = start(root, "--kernel-log", "off")
    run.wait_line(r"fabric ready in")
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    assert not [x for x in run.lines if "kernel log" in x]


def test_a_node_without_a_kernel_log_says_so_once_and_runs(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "hgx-h100")
    os.unlink(root / "dev/kmsg")
    run = start(root)
    run.wait_line(r"warning kernel_log_unreadable: the kernel log is not watched: .*dev/kmsg")
    run.wait_line(r"fabric ready in")
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
