"""Every command that reads stdin or a FIFO, stopped by SIGINT or SIGTERM while it blocks there
(a writer that never ends its input): the documented stop (docs/commands/index.md, exit codes)
instead of click's ``Aborted!`` (exit 1, no JSON), a silent death, or, for ``status
--from-nvidia-smi -``, no end at all (its recording handler let the read restart).

One table: the command, where it reads, how it ends. Each row is sent each signal, the human
run and the ``--json`` run; the signal goes once the process sleeps in the kernel on the pipe
(:func:`tests.runkit.blocked_reading`, /proc/PID/wchan), never after a sleep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from nvfabric.artifacts import cachefile
from tests import runkit
from tests.runkit import blocked_reading, sim, until

#: (id, the arguments, given the test's directory; what the stop message names)
COMMANDS: list[tuple[str, Callable[[Path], list[str]], str]] = [
    ("status", lambda d: ["status", "--from-nvidia-smi", "-"], "stdin"),
    ("status-fifo", lambda d: ["status", "--from-nvidia-smi", str(d / "fifo")], "fifo"),
    ("doctor", lambda d: ["doctor", "--log", "-"], "stdin"),
    ("doctor-fifo", lambda d: ["doctor", "--log", str(d / "fifo")], "fifo"),
    ("domain-check", lambda d: ["domain", "check", "-"], "stdin"),
    ("domain-check-node-list", lambda d: ["domain", "check", str(d / "report.json"),
                                          "--node-list", "/dev/stdin"], "/dev/stdin"),
    ("domain-topology", lambda d: ["domain", "topology", "-"], "stdin"),
    ("imex-config", lambda d: ["imex", "config", "--root", str(d / "tray"), "--dry-run",
                               "--peers", "/dev/stdin"], "/dev/stdin"),
    ("imex-domain", lambda d: ["imex", "domain", "--from-file", "-"], "stdin"),
    ("triage", lambda d: ["triage", "-"], "stdin"),
    ("simulate-bug-report", lambda d: ["simulate", "--from-bug-report", "-",
                                       str(d / "new-node")], "stdin"),
    ("install-from-record", lambda d: ["install", "--from", str(d / "cache"), "--root",
                                       str(d / "tray"), "--dry-run"], "record"),
]


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the rows read besides stdin: a GB200 tray, a status report, a fetch cache whose
    record is a FIFO (no writer: its open waits)."""
    d = tmp_path_factory.mktemp("readers")
    sim(d, "gb200-tray", name="tray")
    done = subprocess.run([sys.executable, "-m", "nvfabric", "status", "--root", str(d / "tray"),
                           "--json"], capture_output=True, text=True, timeout=120, check=False)
    (d / "report.json").write_text(done.stdout)
    (d / "cache").mkdir()
    os.mkfifo(d / "cache" / cachefile.RECORD)
    return d


def _fifo(d: Path) -> tuple[Path, int | None]:
    """A fresh FIFO with a writer that never writes (its reader's read waits)."""
    path = d / "fifo"
    if path.exists():
        path.unlink()
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    writer = os.open(path, os.O_WRONLY)
    os.close(reader)
    return path, writer


@pytest.mark.parametrize(("sig", "as_json"), [(signal.SIGINT, False), (signal.SIGTERM, True),
                                              (signal.SIGTERM, False), (signal.SIGINT, True)],
                         ids=["SIGINT", "SIGTERM-json", "SIGTERM", "SIGINT-json"])
@pytest.mark.parametrize(("args", "reading"), [c[1:] for c in COMMANDS],
                         ids=[c[0] for c in COMMANDS])
def test_a_stop_signal_ends_a_reader_blocked_on_its_input(
        place: Path, tmp_path: Path, args: Callable[[Path], list[str]], reading: str,
        sig: signal.Signals, as_json: bool) -> None:
    writer = None
    if reading == "fifo":
        fifo, writer = _fifo(tmp_path)
        argv = [a.replace(str(tmp_path / "fifo"), str(fifo)) for a in args(tmp_path)]
        reading = str(fifo)
    else:
        argv = args(place)
        if reading == "record":
            reading = str(place / "cache" / cachefile.RECORD)
    env = {k: v for k, v in os.environ.items() if k != "NVFABRIC_DEBUG"}
    proc = runkit.Child([sys.executable, "-m", "nvfabric", *argv, *(["--json"] if as_json
                                                                     else [])],
                        stdin=subprocess.PIPE, env=env)
    try:
        until(lambda: blocked_reading(proc.pid), f"{argv[0]} blocks reading {reading}")
        proc.signal(sig)
        code = proc.wait()
    finally:
        proc.close()
        if proc.proc.stdin is not None:
            proc.proc.stdin.close()
        if writer is not None:
            os.close(writer)
    assert code == 128 + sig, (code, proc.log, proc.stdout)
    assert "Traceback" not in proc.log and "Aborted" not in proc.log
    message = f"stopped by {sig.name} while reading {reading}; nothing was changed"
    if as_json:
        error = json.loads(proc.stdout)["error"]
        assert (error["code"], error["signal"], error["reading"]) == (
            "interrupted", sig.name, reading)
        assert error["message"] == message
        assert proc.log == ""
    else:
        assert proc.stdout == ""
        assert proc.lines == [proc.lines[0]] and proc.lines[0].startswith(
            f"nvfabric: interrupted: {message} (hint: ")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_run_blocked_reading_its_node_list_stops_as_run_does(
        place: Path, sig: signal.Signals) -> None:
    """run's own stop (docs/commands/run.md, SIGTERM/SIGINT at any moment): `stopped`, exit 0,
    its one JSON object, also while it waits on --imex-peers."""
    env = {k: v for k, v in os.environ.items() if k != "NVFABRIC_DEBUG"}
    proc = runkit.Child([sys.executable, "-m", "nvfabric", "run", "--root", str(place / "tray"),
                         "--dry-run", "--imex-peers", "/dev/stdin", "--json"],
                        stdin=subprocess.PIPE, env=env)
    try:
        until(lambda: blocked_reading(proc.pid), "run blocks reading /dev/stdin")
        proc.signal(sig)
        code = proc.wait()
    finally:
        proc.close()
        if proc.proc.stdin is not None:
            proc.proc.stdin.close()
    assert code == 0, proc.log
    assert json.loads(proc.stdout)["result"] == "stopped"
    assert f"received {sig.name} before anything was started: stopped" in proc.log
    assert "Traceback" not in proc.log
