"""`nvfabric events` over a run's event history (filters, JSON, exit codes, what a missing or
damaged history says), and the history as the input of `doctor --log` and `triage --events`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from nvfabric.app.events import parse_since
from nvfabric.effects.history import History, encode
from nvfabric.model.errors import NvfabricError
from tests.conftest import REPO, run_cli

SXID_LINE = ("[  117.984502] nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 24007, Fatal, Link 60 "
             "Minion Link DLREQ interrupt")


def _history(root: Path) -> Path:
    """A state directory under ``root`` with the history of a run an hour ago and now."""
    state = root / "run/nvfabric"
    state.mkdir(parents=True)
    now = time.time()
    clock = iter([now - 3600, now - 3599, now - 10, now - 9, now - 5, now - 1])
    h = History(str(state), clock=lambda: next(clock))
    h.append("run", {"fabric": "nvswitch", "services": ["fabricmanager"]})
    h.append("ready", {"ready_after_s": 2.5})
    h.append("kernel", {"code": "nvswitch_fatal_error", "severity": "error", "message":
                        "NVSwitch fatal error (SXid) 24007 on NVSwitch 0000:08:00.0 (kernel log)",
                        "hint": "reset", "pci": "0000:08:00.0", "device": "0000:08:00.0",
                        "line": SXID_LINE})
    h.append("verdict", {"verdict": "unhealthy", "was": "healthy",
                         "code": "nvswitch_fatal_error", "message": "m"})
    h.append("kernel_repeat", {"code": "nvswitch_fatal_error", "severity": "error",
                               "device": "0000:08:00.0", "count": 41, "message": "m"})
    h.append("kernel", {"code": "imex_not_ready", "severity": "warning", "message": "notify"})
    h.close()
    return state


def test_events_lists_the_history_with_its_filters(tmp_path: Path) -> None:
    _history(tmp_path)
    done = run_cli("events", "--root", str(tmp_path), "--json")
    assert done.returncode == 1, done.stderr  # an error finding is listed
    doc = json.loads(done.stdout)
    assert [e["kind"] for e in doc["events"]] == ["run", "ready", "kernel", "verdict",
                                                  "kernel_repeat", "kernel"]
    assert doc["total"] == 6 and doc["damaged"] == 0
    recent = json.loads(run_cli("events", "--root", str(tmp_path), "--since", "1m",
                                "--json").stdout)
    assert [e["kind"] for e in recent["events"]] == ["kernel", "verdict", "kernel_repeat",
                                                     "kernel"]
    imex = run_cli("events", "--root", str(tmp_path), "--code", "imex_not_ready")
    assert imex.returncode == 0, imex.stderr  # a warning only
    assert "1 of 6 events" in imex.stdout and "warning imex_not_ready: notify" in imex.stdout
    human = run_cli("events", "--root", str(tmp_path)).stdout
    assert "healthy -> unhealthy: nvswitch_fatal_error" in human
    assert "[0000:08:00.0]: m (x41)" in human


def test_events_reads_the_history_a_damaged_line_and_all(tmp_path: Path) -> None:
    state = _history(tmp_path)
    with open(state / "events", "ab") as fh:
        fh.write(encode({"time": 1, "kind": "kernel"})[:25])  # a write torn by a crash
    doc = json.loads(run_cli("events", "--root", str(tmp_path), "--json").stdout)
    assert doc["total"] == 6 and doc["damaged"] == 1


@pytest.mark.parametrize(("args", "says"), [
    (("--since", "ten minutes"), "not a duration"),
    (("--code", "nvswitch_fatal"), "not a finding code"),
    ((), "no event history in"),
])
def test_events_refuses_with_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...],
                                                 says: str) -> None:
    done = run_cli("events", "--root", str(tmp_path), *args)
    assert done.returncode == 2 and says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("text", "seconds"), [("90", 90.0), ("90s", 90.0), ("10m", 600.0),
                                               ("2h", 7200.0), ("1.5d", 129600.0)])
def test_since_durations(text: str, seconds: float) -> None:
    assert parse_since(text) == seconds
    with pytest.raises(NvfabricError):
        parse_since("-5m")


def test_doctor_reads_a_history_as_a_log(tmp_path: Path) -> None:
    state = _history(tmp_path)
    done = run_cli("doctor", "--fabric", "nvswitch", "--log", str(state / "events"), "--json")
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    (sxid,) = [f for f in doc["findings"] if f["code"] == "nvswitch_fatal_error"]
    # classified again from its line: the catalogue's finding, first seen as dmesg printed it
    assert sxid["error"] == 24007 and sxid["first_seen"] == "117.984502"
    assert [f["code"] for f in doc["findings"]] == ["nvswitch_fatal_error"]


def test_triage_takes_the_history_beside_the_bug_report(tmp_path: Path) -> None:
    state = _history(tmp_path)
    report = REPO / "tests/data/bugreports/hgx-h100-healthy.log.gz"
    plain = json.loads(run_cli("triage", str(report), "--json").stdout)
    done = run_cli("triage", str(report), "--events", str(state / "events"), "--json")
    doc = json.loads(done.stdout)
    added = [f for f in doc["findings"] if f.get("section") == "nvfabric events"]
    assert [f["code"] for f in added] == ["nvswitch_fatal_error"]
    assert len(doc["findings"]) == len(plain["findings"]) + 1 and done.returncode == 1
    bad = run_cli("triage", str(report), "--events", str(report))
    assert bad.returncode == 2 and "not an event history" in bad.stderr


def test_event_values_are_in_the_words_of_their_json_not_python_reprs(tmp_path: Path) -> None:
    state = tmp_path / "run/nvfabric"
    state.mkdir(parents=True)
    h = History(str(state))
    h.append("ready", {"ready_after_s": 0.25, "services": [
        {"service": "nvlsm", "pid": 7}, {"service": "fabricmanager", "pid": 8}],
        "published": True, "node": None})
    h.close()
    human = run_cli("events", "--root", str(tmp_path)).stdout
    assert ("services=[service=nvlsm pid=7; service=fabricmanager pid=8], published=true, "
            "node=null") in human
    assert "{'" not in human and "True" not in human and "None" not in human
