"""Issue 10: ``status`` and ``wait`` stop within one second of SIGINT or SIGTERM even while a
fabric-state probe runs (one run waited out the whole 15 s probe timeout), exit 128 + the
signal (130, 143: never 1, which means unhealthy), and leave no probe behind. The bound of
one second is what the issue asks for, measured here from the signal to the exit."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from nvfabric.simulate.fakes import set_faults
from tests import runkit
from tests.runkit import sim, until

BOUND_S = 1.0


def _children_of(pid: int) -> set[int]:
    """The live children of ``pid`` (the probe runs in its own session: found by parent)."""
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.add(int(entry))
    return out


@pytest.mark.parametrize("command", [("status",), ("wait", "--timeout", "120")])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_a_hanging_probe_ends_the_command_within_a_second(
        tmp_path: Path, command: tuple[str, ...], sig: signal.Signals) -> None:
    root = sim(tmp_path, "hgx-h100")
    set_faults(str(root), {"nvidia-smi": {"hang": True}})  # the probe never answers
    env = {k: v for k, v in os.environ.items() if k != "NVFABRIC_DEBUG"}
    proc = runkit.Child([sys.executable, "-m", "nvfabric", *command, "--root", str(root)],
                        env=env)
    probes: set[int] = set()

    def probing() -> bool:
        probes.update(_children_of(proc.pid))
        return bool(probes)

    until(probing, "the fabric-state probe is running")
    time.sleep(0.2)
    sent = time.monotonic()
    proc.signal(sig)
    code = proc.wait()
    took = time.monotonic() - sent
    assert took < BOUND_S, f"{command[0]} took {took:.2f} s after {sig.name}"
    assert code == 128 + sig, proc.log
    assert "Traceback" not in proc.log
    assert f"nvfabric: interrupted: stopped by {sig.name} before it finished" in proc.log
    until(lambda: not any(os.path.exists(f"/proc/{p}") and _alive(p) for p in probes),
          "the probe is killed with the command")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_signal_during_a_blocked_nvml_read_ends_within_a_second() -> None:
    # The host path: NVML is read in a helper thread (facts.gpu._bounded); a read blocked
    # in the driver must not keep the command for the 15 s probe timeout.
    code = ("import time\n"
            "from nvfabric.cli.render import guarded\n"
            "from nvfabric.cli.status import stopped_exits\n"
            "from nvfabric.facts import gpu as live\n"
            "@guarded\n"
            "def status():\n"
            "    with stopped_exits():\n"
            "        print('probing', flush=True)\n"
            "        live._bounded(lambda: time.sleep(60), 15.0)\n"
            "status()\n")
    for sig in (signal.SIGINT, signal.SIGTERM):
        proc = runkit.Child([sys.executable, "-c", code], merge_output=True)
        proc.wait_line("^probing$")
        time.sleep(0.2)
        sent = time.monotonic()
        proc.signal(sig)
        code_ = proc.wait()
        assert time.monotonic() - sent < BOUND_S
        assert code_ == 128 + sig, proc.log
        assert proc.lines[-1].startswith(f"nvfabric: interrupted: stopped by {sig.name} "
                                         "before it finished"), proc.log


@pytest.mark.parametrize("command", [("status",), ("wait", "--timeout", "120")])
def test_sigkill_of_the_command_during_a_hanging_probe_leaves_no_probe_behind(
        tmp_path: Path, command: tuple[str, ...]) -> None:
    """SIGKILL runs no handler of ours: the probe (in its own session, so no terminal signal
    reaches it) used to stay behind with PPID 1, hung, for as long as nvidia-smi hangs. It
    gets PR_SET_PDEATHSIG = SIGKILL, as `run`'s daemons get SIGTERM."""
    root = sim(tmp_path, "hgx-h100")
    set_faults(str(root), {"nvidia-smi": {"hang": True}})
    env = {k: v for k, v in os.environ.items() if k != "NVFABRIC_DEBUG"}
    proc = runkit.Child([sys.executable, "-m", "nvfabric", *command, "--root", str(root)],
                        env=env)
    probes: set[int] = set()

    def probing() -> bool:
        probes.update(_children_of(proc.pid))
        return bool(probes)

    try:
        until(probing, "the fabric-state probe is running")
        proc.signal(signal.SIGKILL)
        proc.wait()
        until(lambda: not any(_alive(p) for p in probes),
              "the probe dies with the SIGKILLed command")
    finally:
        for pid in probes:  # only the probe this test started, by pid
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


#: Run the CLI with a stop signal that arrives while ``pyexpat`` is imported: inside
#: ``PyCapsule_Import``, which ``_elementtree``'s C initialisation calls and which turns any
#: error raised meanwhile into an ImportError, which ElementTree catches. That is where
#: `wait` lost its SIGTERM under load (1 in 10 with four loops on 2 cores): the handler's
#: SystemExit landed there and vanished, and the probe ran on for its 15 s.
_TRIP_DURING_THE_PARSER_IMPORT = """
import os, runpy, signal, sys
class Trip:
    fired = False
    def find_spec(self, name, path=None, target=None):
        if name == "pyexpat" and not Trip.fired:
            Trip.fired = True
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10000):  # the Python-level handler runs here, inside the import
                pass
        return None
sys.meta_path.insert(0, Trip())
sys.argv = ["nvfabric", *sys.argv[1:]]
runpy.run_module("nvfabric", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("command", [("status",), ("wait", "--timeout", "120")])
def test_a_signal_that_lands_inside_a_c_import_still_stops_the_command(
        tmp_path: Path, command: tuple[str, ...]) -> None:
    root = sim(tmp_path, "hgx-h100")
    set_faults(str(root), {"nvidia-smi": {"hang": True}})  # only a stop ends the probe
    env = {k: v for k, v in os.environ.items() if k != "NVFABRIC_DEBUG"}
    proc = runkit.run([sys.executable, "-c", _TRIP_DURING_THE_PARSER_IMPORT, *command,
                       "--root", str(root)], env=env)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
