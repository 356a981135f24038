"""``nvfabric run`` guards against a second fabric manager / nvidia-imex, against paths that
leave the root through a symbolic link, and around the GPU reset command (real ``nvfabric run``
processes against simulated nodes with their fake daemons)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.runkit import Run, codes, events, finding, sim


def test_second_run_with_another_state_dir_is_refused_before_any_reset(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200")
    first = start(root)
    first.wait_line(r"fabric ready in")
    second = start(root, "--json", "--state-dir", "/run/other",
                   "--gpu-reset-command", f"{root}/bin/nvidia-smi -r")
    assert second.wait() == 1
    result = second.result()
    assert result["result"] == "refused"
    assert finding(result, "fabric_service_running")["service"] == "fabricmanager"
    assert not events(root, "nvidia-smi", "reset")
    assert len(events(root, "fabricmanager", "exec")) == 1
    assert first.proc.poll() is None
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    assert "fabric_service_running" not in codes(result)[1:]


def test_second_imex_run_with_another_state_dir_is_refused_before_any_start(
        tmp_path: Path) -> None:
    from tests.cli.test_run_mnnvl import tray

    root = tray(tmp_path)
    first = Run(root)
    second = None
    try:
        first.wait_line(r"nvfabric: fabric ready in")
        second = Run(root, "--json", "--state-dir", "/run/other", "--imex-owner", "host")
        assert second.wait() == 1
        result = second.result()
        assert result["result"] == "refused"
        # the first run is seen as IMEX's owner (its pid and state dir), not only its daemon
        conflict = finding(result, "imex_owner_conflict")
        assert f"nvfabric run (pid {first.proc.pid}, state dir /run/nvfabric)" in \
            conflict["message"]
        assert len(events(root, "imex", "exec")) == 1
        assert not (root / "run/other/imex").exists()
        first.signal(signal.SIGTERM)
        assert first.wait() == 0
    finally:
        first.close()
        if second is not None:
            second.close()


def _link_out(root: Path, inside: str, outside: Path) -> None:
    """Replace ``root/inside`` by a symbolic link to ``outside`` (as a ``var/run -> /run``
    link of a real tree would lead a write out of a simulated root)."""
    target = root / inside
    if target.is_dir() and not target.is_symlink():
        target.rmdir()
    outside.mkdir(parents=True, exist_ok=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(outside)


@pytest.mark.parametrize(("inside", "args", "named"), [
    ("var/run", (), "--nvlsm-pid-file"),
    ("var/run", ("--nvlsm-pid-file", "/tmp/nvlsm.pid"), "--fm-sm-socket"),
    ("run", (), "--state-dir"),
    ("run", ("--dry-run",), "--state-dir"),
    ("srv", ("--state-dir", "/srv/nvfabric"), "--state-dir"),
    ("var/log", ("--fm-set", "LOG_FILE_NAME=/var/log/fm/fabricmanager.log"), "LOG_FILE_NAME"),
])
def test_paths_run_writes_may_not_leave_the_root_through_a_link(
        tmp_path: Path, start: Callable[..., Run], inside: str, args: tuple[str, ...],
        named: str) -> None:
    root = sim(tmp_path, "dgx-b200")
    outside = tmp_path / "host" / inside.replace("/", "_")
    _link_out(root, inside, outside)
    run = start(root, *args)
    assert run.wait() == 2, run.log
    assert named in run.log and ("outside the root" in run.log or "leaves the root" in run.log)
    assert "Traceback" not in run.log
    assert list(outside.iterdir()) == []
    assert not events(root, event="exec")


def _registered_node(tmp_path: Path, start: Callable[..., Run]) -> Path:
    """A B200 node whose GPUs registered under a first run that was then stopped: the next
    start needs the GPU reset (RUN.md R04)."""
    root = sim(tmp_path, "dgx-b200")
    first = start(root)
    first.wait_line(r"fabric ready in")
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    return root


def _reset_script(tmp_path: Path) -> tuple[str, Path]:
    """A reset command that hangs (as `nvidia-smi -r` does on a GPU in use) after writing its
    pid, run through a shell (one process group: sh and its sleep)."""
    pid_file = tmp_path / "reset.pid"
    return f"sh -c 'echo $$ > {pid_file}; sleep 60; echo done'", pid_file


def _gone(pid: int) -> bool:
    from tests.runkit import alive

    return not alive(pid)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_during_the_gpu_reset_stops_it_and_starts_nothing(
        tmp_path: Path, start: Callable[..., Run], sig: int) -> None:
    from tests.runkit import until

    root = _registered_node(tmp_path, start)
    command, pid_file = _reset_script(tmp_path)
    run = start(root, "--json", "--gpu-reset-command", command)
    run.wait_line(r"resetting GPUs before starting fabricmanager")
    until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", "reset started")
    run.signal(sig)
    assert run.wait() == 0
    assert run.result()["result"] == "stopped"
    until(lambda: _gone(int(pid_file.read_text())), "the reset command is stopped")
    assert len(events(root, "fabricmanager", "exec")) == 1  # the first run's only
    assert len(events(root, "nvlsm", "exec")) == 1
    assert "gpu-reset: done" not in run.log


def test_gpu_reset_past_its_timeout_is_killed_and_nothing_starts(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    from tests.runkit import until

    root = _registered_node(tmp_path, start)
    command, pid_file = _reset_script(tmp_path)
    run = start(root, "--json", "--gpu-reset-command", command, "--gpu-reset-timeout", "0.5")
    assert run.wait() == 1
    f = finding(run.result(), "restart_needs_gpu_reset")
    assert f["severity"] == "error" and "did not finish within 0.5 s" in f["message"]
    until(lambda: _gone(int(pid_file.read_text())), "the reset command is killed")
    assert len(events(root, "fabricmanager", "exec")) == 1
    assert len(events(root, "nvlsm", "exec")) == 1


def test_run_json_keeps_every_crash_of_a_run_with_restarts(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    # DGX A100: no GPU reset needed before a restart (as in the R03 back-off case)
    root = sim(tmp_path, "dgx-a100", {"fabricmanager": {"crash_after_s": 0.2, "exit_code": 3}})
    run = start(root, "--json", "--restart", "on-failure", "--restart-delay", "0.05",
                "--restart-max-delay", "0.1")
    run.wait_line(r"restart 3\)")
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    result = run.result()
    exits = [f for f in result["findings"] if f["code"] == "service_exited"]
    assert result["restarts"] >= 2 and len(exits) >= result["restarts"]
    assert all((f["service"], f["exit_code"]) == ("fabricmanager", 3) for f in exits)
    assert [f["restarted"] for f in exits[:result["restarts"]]] == [True] * result["restarts"]
    assert all(f["severity"] == "error" for f in exits)  # as logged (issue 10)
    logged = [line for line in run.lines if "service_exited" in line]
    assert logged and all(line.startswith("nvfabric: error service_exited") for line in logged)
    assert result["ready_after_s"] == round(result["ready_after_s"], 3)
    assert len({f["message"] for f in exits}) == len(exits)  # one per crash (pid, restart n)


@pytest.mark.parametrize(("profile", "args", "up"), [
    ("dgx-b200", (), r"fabric ready in"),
    ("no-gpu", ("--stay",), r"--stay: waiting for SIGTERM"),
])
def test_sighup_is_logged_and_ignored(tmp_path: Path, start: Callable[..., Run], profile: str,
                                      args: tuple[str, ...], up: str) -> None:
    root = sim(tmp_path, profile)
    run = start(root, *args)
    run.wait_line(up)
    run.signal(signal.SIGHUP)
    run.wait_line(r"received SIGHUP: ignored")
    assert run.proc.poll() is None
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
