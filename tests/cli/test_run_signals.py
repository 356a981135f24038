"""Signals at any moment keep `nvfabric run`'s contract: SIGTERM or SIGINT before the
supervisor runs (during the preflight, while nvidia-smi is read; in the moment after the
effective config is written) is `stopped`, exit 0, and with --json one object; never 143 with
no output, never click's `Aborted!`; SIGHUP is ignored with one line, as the supervisor does.
Nothing is left half-way: no temporary file, no fabric manager started, the lock free for the
next run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nvfabric.simulate.fakes import set_faults
from tests.cli.test_status_signals import _children_of
from tests.runkit import Run, codes, events, sim, until


def _probing(run: Run) -> None:
    """Until the run's fabric-state probe (the tree's nvidia-smi, hung) is running."""
    until(lambda: bool(_children_of(run.proc.pid)), "the preflight's nvidia-smi runs")


def _state(root: Path) -> list[str]:
    state = root / "run" / "nvfabric"
    return sorted(p.name for p in state.iterdir()) if state.is_dir() else []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_during_the_preflight_is_stopped_with_one_json_object(
        tmp_path: Path, sig: signal.Signals) -> None:
    root = sim(tmp_path, "hgx-h100")
    set_faults(str(root), {"nvidia-smi": {"hang": True}})  # only a stop ends the probe
    run = Run(root, "--json")
    try:
        _probing(run)
        run.signal(sig)
        assert run.wait() == 0, run.log
        result = run.result()  # exactly one JSON object on stdout
    finally:
        run.close()
    assert (result["result"], result["exit_code"], result["findings"]) == ("stopped", 0, [])
    assert [p["service"] for p in result["processes"]] == ["fabricmanager"]
    assert f"received {sig.name} before anything was started: stopped" in run.log
    assert "Aborted" not in run.log and "Traceback" not in run.log
    assert not events(root, "fabricmanager", "exec")
    assert _state(root) == ["run.lock"]  # no effective config, no temporary file
    until(lambda: not _children_of(run.proc.pid), "the probe is killed with the run")
    set_faults(str(root), {})  # the next run's probe answers: only the lock is in question
    again = Run(root, "--json", "--dry-run")
    try:
        assert again.wait() in (0, 1) and "already_running" not in codes(again.result())
    finally:
        again.close()


def test_a_sighup_during_the_preflight_is_ignored_with_one_line(tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    set_faults(str(root), {"nvidia-smi": {"hang": True}})
    run = Run(root, "--json")
    try:
        _probing(run)
        run.signal(signal.SIGHUP)
        run.signal(signal.SIGTERM)  # what ends it: the SIGHUP did not
        assert run.wait() == 0, run.log
        assert run.result()["result"] == "stopped"
    finally:
        run.close()
    assert run.log.count("received SIGHUP: ignored") == 1


#: ``nvfabric run ARGS`` with a SIGTERM sent to itself right after the effective config was
#: written (the applier returns), before the exec into the supervisor: the moment in which it
#: used to die with 143, printing nothing, fabricmanager.cfg and the lock left behind.
_SIGNAL_AFTER_THE_CONFIG = """
import os, runpy, signal, sys
import nvfabric.effects.apply as applier
written = applier.apply
def apply_then_signal(*args, **kwargs):
    done = written(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)
    return done
applier.apply = apply_then_signal
sys.argv = ["nvfabric", *sys.argv[1:]]
runpy.run_module("nvfabric", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("fabric", ["hgx-h100", "dgx-b200"])
def test_a_stop_signal_right_after_the_config_is_written_is_stopped(
        tmp_path: Path, fabric: str) -> None:
    root = sim(tmp_path, fabric)
    env = {k: v for k, v in os.environ.items() if k not in ("NVFABRIC_DEBUG", "NOTIFY_SOCKET")}
    proc = subprocess.run([sys.executable, "-c", _SIGNAL_AFTER_THE_CONFIG, "run", "--root",
                           str(root), "--json"], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["result"], result["exit_code"]) == ("stopped", 0), proc.stderr
    assert not events(root, "fabricmanager", "exec") and not events(root, "nvlsm", "exec")
    # what a stopped run leaves: its effective config (whole), the lock file nobody holds
    assert _state(root) == ["fabricmanager.cfg", "run.lock"]
    cfg = root / "run" / "nvfabric" / "fabricmanager.cfg"
    assert cfg.read_text() == result["files"][0]["content"]
    ready = subprocess.run([sys.executable, "-m", "nvfabric", "ready", "--root", str(root),
                            "--json"], capture_output=True, text=True, env=env, timeout=60,
                           check=False)
    assert ready.returncode == 1 and json.loads(ready.stdout)["ready"] is False
