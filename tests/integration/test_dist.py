"""The single-file binary (``make dist``) runs the whole CLI and the simulated node's fake
daemons with no Python of the host involved: its output equals the interpreter's; and how it
and the directory build (``make dist-dir``, what the Debian package installs) notify systemd."""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import nvfabric
from tests.integration.distbin import dist_binary, dist_dir
from tests.runkit import Run, alive, events, until

#: The environment of a host without Python: no interpreter on PATH, no Python variables.
BARE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
            "PYTHONPATH": "/nonexistent", "PYTHONHOME": "/nonexistent"}


def binary(*args: str, env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(dist_binary()), *args], capture_output=True, text=True,
                          timeout=timeout, env=env or BARE_ENV, check=False)


def interpreter(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NVFABRIC_DEBUG"}
    return subprocess.run([sys.executable, "-m", "nvfabric", *args], capture_output=True,
                          text=True, timeout=120, env=env, check=False)


def test_version_is_the_package_version() -> None:
    out = binary("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"nvfabric, version {nvfabric.__version__}"


def test_simulate_writes_fakes_that_run_from_the_binary(tmp_path: Path) -> None:
    root = tmp_path / "b200"
    out = binary("simulate", "dgx-b200", str(root), "--json")
    assert out.returncode == 0, out.stderr
    fakes = json.loads(out.stdout)["fakes"]
    assert [os.path.basename(f) for f in fakes] == [
        "nvlsm", "nv-fabricmanager", "nvidia-smi", "nvidia-imex", "nvidia-imex-ctl"]
    first = (root / "bin/nvlsm").read_text().splitlines()[0]
    assert first == f"#!{dist_binary()} --nvfabric-sim-fake"
    # no Python copy of the fakes (the package bin/_nvfabric_fakes/, or the old single file)
    assert not (root / "bin/_nvfabric_fakes").exists()
    assert not (root / "bin/_nvfabric_fakes.py").exists()
    # A fake through its vendor path: the real -L lines of eight B200s.
    smi = subprocess.run([str(root / "usr/bin/nvidia-smi"), "-L"], capture_output=True,
                         text=True, timeout=60, env=BARE_ENV, check=False)
    assert smi.returncode == 0, smi.stderr
    lines = smi.stdout.splitlines()
    assert len(lines) == 8 and all(": NVIDIA B200 (UUID: GPU-" in ln for ln in lines)


def test_plan_and_dry_run_equal_the_interpreters(tmp_path: Path) -> None:
    root = tmp_path / "b200"
    assert binary("simulate", "dgx-b200", str(root)).returncode == 0
    frozen_plan = binary("plan", "--root", str(root), "--json")
    assert frozen_plan.returncode == 0, frozen_plan.stderr
    assert json.loads(frozen_plan.stdout) == json.loads(
        interpreter("plan", "--root", str(root), "--json").stdout)
    assert json.loads(frozen_plan.stdout)["fabric"] == "nvlink5"
    dry = binary("run", "--root", str(root), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    frozen = json.loads(dry.stdout)
    assert frozen["result"] == "would_start"
    assert frozen == json.loads(interpreter("run", "--root", str(root), "--dry-run",
                                            "--json").stdout)


def test_a_usage_error_is_one_line_and_exit_2(tmp_path: Path) -> None:
    out = binary("plan", "--root", str(tmp_path / "missing"), "--json")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert json.loads(out.stdout)["error"]["code"] == "input_unreadable"


def test_run_brings_a_simulated_b200_to_ready_and_stops_in_order(tmp_path: Path) -> None:
    root = tmp_path / "b200"
    assert binary("simulate", "dgx-b200", str(root)).returncode == 0
    run = Run(root, "--json", command=(str(dist_binary()),), env=BARE_ENV)
    try:
        run.wait_line(r"fabric ready in [0-9.]+ s")
        # The fake daemons are the binary again; they see the caller's library path, not the
        # bundle's, and unpack their own copy of it.
        ready = json.loads((root / "run/nvfabric/ready").read_text())
        for service in ready["services"]:
            environ = Path(f"/proc/{service['pid']}/environ").read_bytes().split(b"\0")
            assert not any(e.startswith(b"LD_LIBRARY_PATH=") for e in environ), service
            assert b"PYINSTALLER_RESET_ENVIRONMENT=1" in environ, service
            cmdline = Path(f"/proc/{service['pid']}/cmdline").read_bytes().split(b"\0")
            assert cmdline[:2] == [str(dist_binary()).encode(), b"--nvfabric-sim-fake"]
        run.signal()
        assert run.wait() == 0, run.log
    finally:
        run.close()
    result = run.result()
    assert result["result"] == "stopped" and result["findings"] == []
    assert result["ready_after_s"] is not None
    execs = [e["prog"] for e in events(root, event="exec")]
    assert execs[:2] == ["nvlsm", "fabricmanager"], execs
    order = run.log.index("fabricmanager stopped"), run.log.index("nvlsm stopped")
    assert order[0] < order[1]
    until(lambda: not any(Path(f"/proc/{s['pid']}").exists() for s in ready["services"]),
          "the fake daemons to be gone")



def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(c) for c in text.split()]


def test_a_sigkilled_bootloader_takes_the_supervisor_and_its_daemons_down_in_order(
        tmp_path: Path) -> None:
    # kill -9 of the binary's main pid (what a parent that knows only that pid does: the Slurm
    # epilog's last resort, an operator, a container runtime) reaches the bootloader alone; its
    # Python child, the supervisor, must not go on as an orphan with NVLSM and fabric manager.
    root = tmp_path / "b200"
    assert binary("simulate", "dgx-b200", str(root)).returncode == 0
    run = Run(root, command=(str(dist_binary()),), env=BARE_ENV)
    supervisor = None
    try:
        run.wait_line(r"fabric ready in [0-9.]+ s")
        [supervisor] = _children(run.proc.pid)
        ready = json.loads((root / "run/nvfabric/ready").read_text())
        run.signal(signal.SIGKILL)
        run.proc.wait(10)
        until(lambda: not alive(supervisor), "the supervisor to exit after its bootloader")
        until(lambda: not any(alive(s["pid"]) for s in ready["services"]),
              "the fake daemons to be gone")
        for t in run._threads:  # the pipes close once the supervisor is gone
            t.join(5)
        order = run.log.index("fabricmanager stopped"), run.log.index("nvlsm stopped")
        assert order[0] < order[1], run.log
    finally:
        if supervisor is not None and alive(supervisor):
            os.kill(supervisor, signal.SIGKILL)
        run.close()


@pytest.mark.parametrize("build", ["one-file", "one-dir"])
def test_ready_comes_from_the_directory_builds_main_pid_and_from_the_binarys_child(
        tmp_path: Path, build: str) -> None:
    # The one-file binary is two processes: the main pid (PyInstaller's bootloader) and the
    # Python child that runs nvfabric and sends READY=1, which systemd's NotifyAccess=main
    # would drop, so the unit its `unit install` writes has NotifyAccess=all. The directory
    # build (what the Debian package installs) is one process, exec'd into the lean
    # supervisor: READY=1 comes from the main pid, and the unit as shipped holds.
    program = str(dist_binary() if build == "one-file" else dist_dir())
    root = tmp_path / "b200"
    assert subprocess.run([program, "simulate", "dgx-b200", str(root)], env=BARE_ENV,
                          capture_output=True, timeout=120, check=False).returncode == 0
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    sock.settimeout(60)
    run = Run(root, command=(program,), env={**BARE_ENV, "NOTIFY_SOCKET": path})
    try:
        sender = None
        while sender is None:
            data, ancdata, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(struct.calcsize("3i")))
            if b"READY=1" in data.split(b"\n"):
                for level, kind, cred in ancdata:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                        sender = array.array("i", cred[:struct.calcsize("3i")])[0]
        if build == "one-dir":
            assert sender == run.proc.pid
            cmdline = Path(f"/proc/{sender}/cmdline").read_bytes().split(b"\0")
            assert cmdline[:2] == [program.encode(), b"--supervise-fd"], cmdline
        else:
            assert sender != run.proc.pid
            stat_line = Path(f"/proc/{sender}/stat").read_text()
            assert int(stat_line.rsplit(")", 1)[1].split()[1]) == run.proc.pid  # its parent
        run.signal()
        assert run.wait() == 0, run.log
    finally:
        run.close()
        sock.close()
    staging = tmp_path / "staging"
    staging.mkdir()
    done = subprocess.run([program, "unit", "install", "--root", str(staging)],
                          capture_output=True, text=True, timeout=120, env=BARE_ENV,
                          check=False)
    assert done.returncode == 0, done.stderr
    notify = "all" if build == "one-file" else "main"
    assert f"\nNotifyAccess={notify}\n" in (staging / "etc/systemd/system/nvfabric.service"
                                            ).read_text()
