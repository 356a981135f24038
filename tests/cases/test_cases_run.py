"""The RUN.md cases (tests/data/cases/RUN.md, R01-R06), each against a simulated node with the
fake daemons running as real child processes of a real ``nvfabric run`` process."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nvfabric.simulate.fakes import gpus, set_faults
from tests.cases import CASES, load_run_cases
from tests.conftest import run_cli
from tests.runkit import Run, alive, codes, crash, events, finding, sim, until

B200_GUID = "0xe09d730300e400e8"


def test_run_md_lists_the_cases_tested_here() -> None:
    cases = load_run_cases()
    for case in ("R01", "R02", "R03", "R04", "R05", "R06", "R07", "R08", "R09", "R10"):
        assert case in cases
    assert cases["R08"].startswith("a missing package is a fault of the node")


# ---------------------------------------------------------------- R01 order and GUID handoff


def test_r01_nvlsm_first_one_guid_fabricmanager_after_the_socket(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200")
    run = start(root, "--json")
    run.wait_line(r"fabric ready in")
    sm = events(root, "nvlsm", "exec")
    sock = events(root, "nvlsm", "socket")
    fm = events(root, "fabricmanager", "exec")
    assert len(sm) == 1 and len(sock) == 1 and len(fm) == 1
    assert sm[0]["t"] <= sock[0]["t"] <= fm[0]["t"]
    assert sm[0]["argv"][sm[0]["argv"].index("-g") + 1] == B200_GUID
    assert fm[0]["argv"][fm[0]["argv"].index("-g") + 1] == B200_GUID
    assert sm[0]["argv"][-2:] == ["-f", "stdout"]
    cfg = Path(fm[0]["argv"][fm[0]["argv"].index("-c") + 1]).read_text(encoding="utf-8")
    assert f"FM_SM_MGMT_PORT_GUID={B200_GUID}" in cfg and "\nDAEMONIZE=0\n" in cfg
    assert {g["state"] for g in gpus(str(root))} == {"completed"}
    ready = json.loads((root / "run/nvfabric/ready").read_text(encoding="utf-8"))
    assert [s["service"] for s in ready["services"]] == ["nvlsm", "fabricmanager"]
    assert ready["management_port"]["guid"] == B200_GUID
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    assert run.result()["result"] == "stopped"
    # R05: fabric manager is stopped (and gone) before NVLSM is asked to stop.
    log = run.log
    assert log.index("fabricmanager stopped") < log.index("stopping nvlsm")
    assert not (root / "run/nvfabric/ready").exists()


def test_r01_guid_of_the_chosen_port_goes_to_both_daemons(tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-b200-4lpf")  # mlx5_10, mlx5_11, mlx5_8 have the SM disabled
    proc = run_cli("run", "--root", str(root), "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    argvs = {p["service"]: p["argv"] for p in data["processes"]}
    assert list(argvs) == ["nvlsm", "fabricmanager"]
    for argv in argvs.values():
        assert argv[argv.index("-g") + 1] == "0x0a0b0c0300d00009"


def test_r01_socket_that_never_appears_ends_in_a_clear_error(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200", {"nvlsm": {"no_socket": True}})
    # 5 s, not less: the lines checked below come after the fake's start-up, which a loaded
    # machine stretches past half a second
    run = start(root, "--json", "--socket-timeout", "5")
    assert run.wait() == 1
    f = finding(run.result(), "socket_timeout")
    assert f["socket"].endswith("/var/run/nvidia-fabricmanager/fm_sm_ipc.socket")
    assert "SUBNET UP" in f["last_lines"]
    assert not events(root, "fabricmanager", "exec")
    assert not alive(events(root, "nvlsm", "exec")[0]["pid"])


def test_r01_nvswitch_node_runs_fabric_manager_alone_without_g(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "hgx-h100")
    run = start(root)
    run.wait_line(r"fabric ready in")
    fm = events(root, "fabricmanager", "exec")
    assert not events(root, "nvlsm") and len(fm) == 1 and "-g" not in fm[0]["argv"]
    run.signal(signal.SIGINT)
    assert run.wait() == 0


# ---------------------------------------------------------------- R02 a failed start is a failure


def test_r02_fabric_manager_exiting_during_start_fails_the_run(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200",
               {"fabricmanager": {"stuck": True, "crash_after_s": 0.3, "exit_code": 1}})
    run = start(root, "--json")
    assert run.wait() == 1
    f = finding(run.result(), "service_exited")
    assert (f["service"], f["exit_code"], f["phase"]) == ("fabricmanager", 1, "during start")
    assert any("Successfully configured" in line for line in f["last_lines"])
    assert "fabric ready" not in run.log
    assert not (root / "run/nvfabric/ready").exists()
    assert not alive(events(root, "nvlsm", "exec")[0]["pid"])
    assert {g["state"] for g in gpus(str(root))} == {"in_progress"}


def test_r02_nvlsm_crashing_before_its_socket_fails_the_start(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200", {"nvlsm": {"socket_delay_s": 5, "crash_after_s": 0.2,
                                                "exit_code": 139}})
    run = start(root, "--json")
    assert run.wait() == 1
    f = finding(run.result(), "service_exited")
    assert (f["service"], f["exit_code"], f["phase"]) == ("nvlsm", 139, "during start")
    assert not events(root, "fabricmanager", "exec")


def test_r02_nvlsm_failure_is_explained_by_its_own_lines(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200")
    (root / "sys/class/infiniband_mad/abi_version").unlink()  # ib_umad's device class is gone
    run = start(root, "--json")
    assert run.wait() == 1
    result = run.result()
    f = finding(result, "service_exited")
    assert f["service"] == "nvlsm" and f["phase"] == "during start"
    assert "missing_kernel_module" in f["diagnosis"]
    assert finding(result, "missing_kernel_module")["module"] == "ib_umad"
    assert "nvfabric: error missing_kernel_module" in run.log  # found live, from the line
    assert not events(root, "fabricmanager", "exec")


def test_r02_version_mismatch_is_refused_before_any_start(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200", {"fabricmanager": {"version": "570.133.20"}})
    run = start(root, "--json")
    assert run.wait() == 1
    f = finding(run.result(), "version_mismatch")
    assert (f["fm_version"], f["driver_version"]) == ("570.133.20", "570.148.08")
    assert not events(root, event="exec")


@pytest.mark.parametrize("key,value", [
    ("FABRIC_NODE_CONFIG_FILE", "/etc/nvidia/nodes.cfg"),
    ("TOPOLOGY_FILE_PATH", "/usr/share/nvidia/tesla/nvswitch"),
])
def test_r02_config_path_that_cannot_exist_names_its_key(
        tmp_path: Path, start: Callable[..., Run], key: str, value: str) -> None:
    root = sim(tmp_path, "hgx-h100")
    run = start(root, "--json", "--fm-set", f"{key}={value}")
    assert run.wait() == 1
    assert finding(run.result(), "config_invalid_value")["key"] == key
    assert not events(root, event="exec")


def test_run_refuses_a_blocked_plan(tmp_path: Path, start: Callable[..., Run]) -> None:
    import yaml

    case = yaml.safe_load((CASES / "P06-b200-ib-umad-missing.yaml").read_text(encoding="utf-8"))
    root = sim(tmp_path, case["node"])
    run = start(root, "--json")
    assert run.wait() == 1
    result = run.result()
    assert result["result"] == "blocked"
    assert set(case["expect"]["codes"]) <= set(codes(result))
    assert not events(root, event="exec")


# ---------------------------------------------------------------- R03 live and die together


def test_r03_nvlsm_dying_after_ready_stops_fabric_manager(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200")
    run = start(root, "--json")
    run.wait_line(r"fabric ready in")
    os.kill(events(root, "nvlsm", "exec")[0]["pid"], signal.SIGKILL)
    assert run.wait() == 1
    f = finding(run.result(), "service_exited")
    assert (f["service"], f["signal"], f["phase"]) == (
        "nvlsm", signal.SIGKILL, "after the fabric was ready")
    assert "stopping fabricmanager" in run.log
    assert not alive(events(root, "fabricmanager", "exec")[0]["pid"])


def test_r03_fabric_manager_crashing_after_ready_stops_nvlsm(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200", {"fabricmanager": {"crash_on_sigusr1": True, "exit_code": 3}})
    run = start(root, "--json")
    run.wait_line(r"fabric ready in")
    crash(root, "fabricmanager")
    assert run.wait() == 1
    f = finding(run.result(), "service_exited")
    assert (f["service"], f["exit_code"]) == ("fabricmanager", 3)
    assert not alive(events(root, "nvlsm", "exec")[0]["pid"])


# R03's back-off (doubling to the cap, reset once ready for the cap) on DGX A100 (success line
# readiness, no GPU reset) is tested on a fake clock:
# test_supervisor_machine.py::test_r03_a100_fabric_manager_restarts_on_its_success_line_...;
# a real run that restarts: test_run_guards.py::test_run_json_keeps_every_crash_of_a_run_....


# ---------------------------------------------------------------- R04 restart needs a GPU reset


def test_r04_no_silent_fabric_manager_restart_after_registration(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200", {"fabricmanager": {"crash_on_sigusr1": True}})
    run = start(root, "--json", "--restart", "on-failure", "--restart-delay", "0.05")
    run.wait_line(r"fabric ready in")
    crash(root, "fabricmanager")
    assert run.wait() == 1
    result = run.result()
    assert finding(result, "restart_needs_gpu_reset")["services"] == "fabricmanager"
    assert len(events(root, "fabricmanager", "exec")) == 1
    # none happened; the crash that asked for the restart is kept, first
    assert result["restarts"] == 0
    assert codes(result)[:2] == ["service_exited", "restart_needs_gpu_reset"]
    assert finding(result, "service_exited")["service"] == "fabricmanager"


def test_r04_a_fabric_state_that_cannot_be_read_refuses_the_start(tmp_path: Path) -> None:
    # found with a hung nvidia-smi on GPUs left registered (started after 15 s, as if none
    # were); the kind is every reading that gives no state: here the node's nvidia-smi is gone
    root = sim(tmp_path, "dgx-b200")
    (root / "bin/nvidia-smi").unlink()
    for argv in (("--dry-run", "--json"), ("--json",)):
        proc = run_cli("run", "--root", str(root), *argv)
        assert proc.returncode == 1, proc.stderr
        result = json.loads(proc.stdout)
        assert result["result"] == "refused"
        f = finding(result, "restart_needs_gpu_reset")
        assert f["gpus"] == "fabric state unreadable" and "bin/nvidia-smi" in f["reason"]
    assert events(root, "nvlsm") == [] and events(root, "fabricmanager", "exec") == []


def test_r04_reset_command_opt_in_resets_then_restarts(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200", {"fabricmanager": {"crash_on_sigusr1": True}})
    run = start(root, "--restart", "on-failure", "--restart-delay", "0.05",
                "--gpu-reset-command", f"{root}/bin/nvidia-smi -r")
    run.wait_line(r"fabric ready in")
    set_faults(str(root), {})  # the restarted fabric manager stays up
    crash(root, "fabricmanager")
    run.wait_line(r"resetting GPUs before starting fabricmanager")
    run.wait_count(r"fabric ready in", 2)
    assert "gpu-reset: All done." in run.lines
    (reset,) = events(root, "nvidia-smi", "reset")
    fm = events(root, "fabricmanager", "exec")
    assert len(fm) == 2 and fm[0]["t"] < reset["t"] < fm[1]["t"]
    run.signal(signal.SIGTERM)
    assert run.wait() == 0


def test_r04_a_second_run_after_registration_needs_the_reset(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200")
    first = start(root)
    first.wait_line(r"fabric ready in")
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    second = start(root, "--json")
    assert second.wait() == 1
    assert "restart_needs_gpu_reset" in codes(second.result())
    assert len(events(root, "fabricmanager", "exec")) == 1
    # --dry-run runs the same preflight: the same refusal, the same exit code
    dry = run_cli("run", "--root", str(root), "--dry-run", "--json")
    assert dry.returncode == 1
    dry_result = json.loads(dry.stdout)
    assert (dry_result["result"], codes(dry_result)) == ("refused", codes(second.result()))
    # human output, with and without --dry-run, gives the finding's hint
    for args in ((), ("--dry-run",)):
        human = run_cli("run", "--root", str(root), *args)
        assert human.returncode == 1
        assert "restart_needs_gpu_reset: GPUs are already registered" in human.stderr
        assert ("hint: stop CUDA clients, then run again with the GPU reset: `nvfabric run "
                f"--root {root} --gpu-reset-command") in human.stderr
    # with the reset command the dry run says what it would do, and would start (the
    # tree's nvidia-smi: a bare "nvidia-smi" is not on this machine's PATH, and a reset
    # command that cannot run is a refusal, tests/cli/test_run_dry_checks.py)
    dry = run_cli("run", "--root", str(root), "--dry-run", "--json", "--gpu-reset-command",
                  f"{root}/bin/nvidia-smi -r")
    assert dry.returncode == 0
    dry_result = json.loads(dry.stdout)
    assert dry_result["result"] == "would_start"
    assert finding(dry_result, "restart_needs_gpu_reset")["severity"] == "info"
    assert len(events(root, "fabricmanager", "exec")) == 1 and not events(root, "nvidia-smi",
                                                                           "reset")


# ---------------------------------------------------------------- R05 stop cleanly


def test_r05_child_ignoring_sigterm_is_killed_after_the_grace_period(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200", {"fabricmanager": {"ignore_sigterm": True}})
    run = start(root, "--grace", "0.3")
    run.wait_line(r"fabric ready in")
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    assert "fabricmanager (pid" in run.wait_line(r"ignored SIGTERM for 0.3 s: SIGKILL")
    run.wait_line(r"fabricmanager stopped \(killed by SIGKILL\)")
    run.wait_line(r"nvlsm stopped \(exited with code 0\)")


def _stop_order(run: Run) -> tuple[str, str]:
    fm = run.wait_line(r"fabricmanager stopped")
    sm = run.wait_line(r"nvlsm stopped")
    assert run.lines.index(fm) < run.lines.index(sm), run.log
    return fm, sm


def test_r05_a_stop_signal_delivered_twice_at_once_still_stops_in_order(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    # One stop that reaches nvfabric twice within milliseconds (the one-file binary's
    # bootloader forwards what it gets, and Talos or a terminal signals it too) is one request:
    # fabric manager is given its grace period, not SIGKILLed.
    # fabric manager takes 3 s to stop (within the 10 s grace): the second signal, sent once
    # the first was handled, reaches a run that is still stopping however slow the machine
    root = sim(tmp_path, "dgx-b200", {"fabricmanager": {"stop_delay_s": 3}})
    run = start(root)
    run.wait_line(r"fabric ready in")
    run.signal(signal.SIGTERM)
    run.wait_line(r"stopping fabricmanager")
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    assert "the same stop request, still stopping in order" in run.log
    assert "killing what is left" not in run.log and "SIGKILL)" not in run.log
    fm, sm = _stop_order(run)
    assert "exited with code 0" in fm and "exited with code 0" in sm


# R05's second stop signal after REPEATED_STOP_WINDOW_S kills at once: on a fake clock,
# tests/supervisor/test_machine.py::test_r05_a_second_signal_after_the_window_kills_at_once
# (the signal path of a real run: the test above, the SIGKILL after a grace: the one before).


def test_r05_sigterm_to_every_process_at_once_stops_cleanly(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    # Talos stops an extension service with SIGTERM to every process of its container
    # (containerd WithKillAll): nvfabric and both daemons get it together, so the daemons stop
    # in whatever order they exit; nothing is restarted or SIGKILLed, and the run exits 0.
    root = sim(tmp_path, "dgx-b200")
    run = start(root, "--restart", "on-failure")
    run.wait_line(r"fabric ready in")
    # the daemons by their exec events: a child listed from /proc may be the GPU probe's,
    # still ending after its answer on a loaded machine (gone by the time it is signalled)
    pids = [run.proc.pid, *(int(events(root, prog, "exec")[0]["pid"])
                            for prog in ("nvlsm", "fabricmanager"))]
    assert set(pids[1:]) <= set(_children(run.proc.pid))
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    assert run.wait() == 0, run.log
    assert "killing what is left" not in run.log and "killed by SIGKILL" not in run.log
    run.wait_line(r"all services stopped")
    # nothing was started again
    assert len(events(root, "fabricmanager", "exec")) == 1, run.log
    assert len(events(root, "nvlsm", "exec")) == 1, run.log
    assert not any(alive(p) for p in pids[1:])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_r05_signal_during_start_stops_and_exits_0(
        tmp_path: Path, start: Callable[..., Run], sig: int) -> None:
    root = sim(tmp_path, "dgx-b200", {"nvlsm": {"socket_delay_s": 30}})
    run = start(root)
    run.wait_line(r"nvlsm: Entering DISCOVERING state")
    run.signal(sig)
    assert run.wait() == 0
    assert not events(root, "fabricmanager", "exec")
    assert not alive(events(root, "nvlsm", "exec")[0]["pid"])


def test_r05_as_pid_1_every_orphan_is_reaped(tmp_path: Path, start: Callable[..., Run]) -> None:
    # Needs root and unshare(1) (util-linux) for a PID namespace; CI runs as root.
    root = sim(tmp_path, "dgx-b200", {"nvlsm": {"spawn_orphans": 5}})
    run = start(root, prefix=("unshare", "-fp", "--kill-child"))
    run.wait_line(r"fabric ready in")
    (nvfabric_pid,) = _children(run.proc.pid)
    until(lambda: len(events(root, "nvlsm", "orphan")) == 5, "5 orphans ran")
    # Each orphan was re-parented to nvfabric (PID 1 inside the namespace) ...
    assert {o["ppid"] for o in events(root, "nvlsm", "orphan")} == {1}
    # ... and nvfabric reaped every one of them: no zombie child is left.
    until(lambda: not [p for p in _children(nvfabric_pid) if _state(p) == "Z"],
          "no zombie children of nvfabric")
    os.kill(nvfabric_pid, signal.SIGTERM)  # unshare(1) does not forward signals
    assert run.wait() == 0
    run.wait_line(r"all services stopped")


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry))
    return out


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


# ---------------------------------------------------------------- R06 never loosen modes


def test_r06_directories_created_0700_and_existing_ones_never_widened(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200", {"nvlsm": {"socket_delay_s": 30}})
    state = root / "run/nvfabric"
    state.mkdir(parents=True)
    os.chmod(state, 0o750)
    run = start(root)
    run.wait_line(r"started nvlsm")
    runtime = root / "var/run/nvidia-fabricmanager"
    assert stat.S_IMODE(runtime.stat().st_mode) == 0o700  # created by nvfabric, tight
    assert stat.S_IMODE(state.stat().st_mode) == 0o750  # existing: left exactly as it was
    assert stat.S_IMODE((state / "fabricmanager.cfg").stat().st_mode) == 0o644
    run.signal(signal.SIGTERM)
    assert run.wait() == 0
    os.chmod(runtime, 0o711)
    second = start(root)
    second.wait_line(r"started nvlsm")
    assert stat.S_IMODE(runtime.stat().st_mode) == 0o711  # existing: not touched
    second.signal(signal.SIGTERM)
    assert second.wait() == 0
    assert not [line for line in second.lines if line.startswith("nvfabric: created")]


# ---------------------------------------------------------------- R09 a reset is checked


def test_r09_a_reset_that_did_nothing_does_not_start_fabric_manager(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    assert "R09" in load_run_cases()
    root = sim(tmp_path, "dgx-b200")
    first = start(root)
    first.wait_line(r"fabric ready in")
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    assert {g["state"] for g in gpus(str(root))} == {"completed"}
    second = start(root, "--json", "--gpu-reset-command", "true")  # returns 0, resets nothing
    assert second.wait() == 1
    result = second.result()
    f = finding(result, "restart_needs_gpu_reset")
    assert f["severity"] == "error" and "still registered" in f["message"]
    assert len(f["gpus"]) == 8 and all(g.startswith("GPU ") for g in f["gpus"])
    assert f["gpus"][0] in f["message"]
    assert len(events(root, "fabricmanager", "exec")) == 1  # not started again
    # a reset that resets: checked, then fabric manager starts
    third = start(root, "--gpu-reset-command", f"{root}/bin/nvidia-smi -r")
    third.wait_line(r"fabric ready in")
    assert "GPU reset checked: 8 GPUs" in third.log
    assert len(events(root, "fabricmanager", "exec")) == 2
    third.signal(signal.SIGTERM)
    assert third.wait() == 0


def test_r09_the_in_process_restart_checks_the_reset_too(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200", {"fabricmanager": {"crash_on_sigusr1": True}})
    run = start(root, "--json", "--restart", "on-failure", "--restart-delay", "0.05",
                "--gpu-reset-command", "true")
    run.wait_line(r"fabric ready in")
    crash(root, "fabricmanager")
    assert run.wait() == 1
    result = run.result()
    assert codes(result)[:2] == ["service_exited", "restart_needs_gpu_reset"]
    assert "still registered" in finding(result, "restart_needs_gpu_reset")["message"]
    assert result["restarts"] == 0 and len(events(root, "fabricmanager", "exec")) == 1


# ---------------------------------------------------------------- R10 readiness of a live run


def _ready_probe(root: Path) -> tuple[int, dict[str, Any]]:
    proc = run_cli("ready", "--root", str(root), "--json")
    return proc.returncode, json.loads(proc.stdout)


def test_r10_ready_file_of_a_killed_run_is_stale_and_removed_by_a_refused_run(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    assert "R10" in load_run_cases()
    root = sim(tmp_path, "dgx-b200")
    ready = root / "run/nvfabric/ready"
    first = start(root)
    first.wait_line(r"fabric ready in")
    rc, probe = _ready_probe(root)
    assert (rc, probe["ready"], probe["run"]["pid"]) == (0, True, first.proc.pid)
    assert json.loads(ready.read_text(encoding="utf-8"))["pid"] == first.proc.pid
    first.signal(signal.SIGKILL)
    first.wait()
    for e in events(root, None, "exec"):
        until(lambda pid=e["pid"]: not alive(pid), "the daemons are gone with the run")
    assert ready.exists()  # kill -9: nobody removed it ...
    rc, probe = _ready_probe(root)  # ... but it no longer counts
    assert (rc, probe["ready"]) == (1, False)
    assert probe["findings"][0]["code"] == "run_not_ready"
    assert f"names run pid {first.proc.pid}" in probe["findings"][0]["message"]
    second = start(root, "--json")  # refused: GPUs registered, no reset command (R04)
    assert second.wait() == 1
    assert "restart_needs_gpu_reset" in codes(second.result())
    assert not ready.exists()
    assert "removed the stale readiness file" in second.log


def test_r10_a_blocked_run_removes_a_stale_ready_file(tmp_path: Path,
                                                     start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-a100")
    ready = root / "run/nvfabric/ready"
    first = start(root)
    first.wait_line(r"fabric ready in")
    first.signal(signal.SIGKILL)
    first.wait()
    (fm,) = [e["pid"] for e in events(root, "fabricmanager", "exec")]
    until(lambda: not alive(fm), "fabric manager is gone with the run")
    assert ready.exists()
    shutil.rmtree(root / "sys/module/nvidia")  # the driver unloaded: the plan is blocked
    blocked = start(root, "--json")
    assert blocked.wait() == 1
    assert blocked.result()["result"] == "blocked"
    assert not ready.exists()
    rc, probe = _ready_probe(root)
    assert rc == 1 and "no readiness file" in probe["findings"][0]["message"]


def test_r10_a_run_refused_by_the_lock_leaves_the_live_runs_ready_file(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200")
    first = start(root)
    first.wait_line(r"fabric ready in")
    second = start(root, "--json")
    assert second.wait() == 1
    assert codes(second.result()) == ["already_running"]
    rc, probe = _ready_probe(root)
    assert (rc, probe["run"]["pid"]) == (0, first.proc.pid)
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    rc, probe = _ready_probe(root)
    assert rc == 1 and "no readiness file" in probe["findings"][0]["message"]


# ---------------------------------------------------------------- other platforms and modes


def test_run_on_a_node_without_fabric_starts_nothing(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "h100-pcie")
    run = start(root)
    assert run.wait() == 0
    assert "fabric none: nothing to start" in run.log
    stay = start(root, "--stay")
    stay.wait_line(r"waiting for SIGTERM")
    other = start(root, "--stay")  # a second pod on the same node
    assert other.wait() == 1 and "already_running" in other.log
    stay.signal(signal.SIGTERM)
    assert stay.wait() == 0
    assert not events(root, event="exec")


def test_run_on_a_gb200_tray_never_starts_fabric_manager(tmp_path: Path) -> None:
    root = sim(tmp_path, "gb200-tray")
    proc = run_cli("run", "--root", str(root), "--dry-run", "--json")
    data = json.loads(proc.stdout)
    assert "fabricmanager" not in [p["service"] for p in data.get("processes", [])]
    assert not events(root, "fabricmanager")


def test_dry_run_prints_argv_and_files_and_writes_nothing(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    shipped = (root / "usr/share/nvidia/nvswitch/fabricmanager.cfg").read_text(encoding="utf-8")
    proc = run_cli("run", "--root", str(root), "--dry-run", "--json", "--fabric-mode", "1",
                   env={"NVFM_CONFIG_LOG_LEVEL": "3"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [p["service"] for p in data["processes"]] == ["nvlsm", "fabricmanager"]
    (cfg,) = data["files"]
    assert cfg["path"] == f"{root}/run/nvfabric/fabricmanager.cfg"
    for line in ("DAEMONIZE=0", "FABRIC_MODE=1", "LOG_LEVEL=3",
                 f"FM_SM_MGMT_PORT_GUID={B200_GUID}"):
        assert line in cfg["content"].splitlines()
    assert not (root / "run/nvfabric").exists()
    assert (root / "usr/share/nvidia/nvswitch/fabricmanager.cfg").read_text(
        encoding="utf-8") == shipped
    assert not events(root, event="exec")


def test_ready_is_sent_to_notify_socket(tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "hgx-h100")
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(30)
        run = start(root, env={"NOTIFY_SOCKET": path})
        before = []
        while not (message := sock.recv(4096).decode()).startswith("READY=1\n"):
            before.append(message)
        # STATUS= lines say what it waited for (fabric manager's GPU registration, n/m GPUs)
        assert before[0] == "STATUS=fabricmanager started; waiting for GPU fabric state"
        assert all(re.fullmatch(r"STATUS=waiting for GPU fabric registration: \d/8 GPUs "
                                r"completed", m) for m in before[1:]), before
        run.signal(signal.SIGTERM)
        assert sock.recv(4096).decode() == "STOPPING=1"
    assert run.wait() == 0


@pytest.mark.parametrize(("profile", "args", "status"), [
    ("h100-pcie", (), "STATUS=fabric none: nothing to start ("),
    ("gb200-tray", ("--imex-owner", "slurm"),
     "STATUS=IMEX is owned by slurm; nvfabric starts nothing"),
])
def test_a_run_that_starts_nothing_still_tells_systemd_it_started(
        tmp_path: Path, profile: str, args: tuple[str, ...], status: str) -> None:
    # Type=notify: a main process that exits 0 before READY=1 is a failed start ('protocol')
    root = sim(tmp_path, profile)
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(0)
        proc = run_cli("run", "--root", str(root), *args, env={"NOTIFY_SOCKET": path})
        assert proc.returncode == 0, proc.stderr
        ready, status_line = sock.recv(4096).decode().split("\n")
        with pytest.raises(BlockingIOError):
            sock.recv(4096)
        dry = run_cli("run", "--root", str(root), *args, "--dry-run",
                      env={"NOTIFY_SOCKET": path})
        assert dry.returncode == 0
        with pytest.raises(BlockingIOError):  # a dry run tells systemd nothing
            sock.recv(4096)
    assert ready == "READY=1" and status_line.startswith(status)
    assert events(root, event="exec") == []


# ---------------------------------------------------------------- nvfabric run killed with -9


def test_sigkill_of_run_takes_nvlsm_and_fabric_manager_with_it(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    # No handler of nvfabric runs on SIGKILL: the children's parent-death signal (SIGTERM,
    # set in each child before exec) is what stops them; without it they live on as orphans.
    root = sim(tmp_path, "dgx-b200")
    run = start(root)
    run.wait_line(r"fabric ready in")
    pids = [events(root, prog, "exec")[0]["pid"] for prog in ("nvlsm", "fabricmanager")]
    run.signal(signal.SIGKILL)
    assert run.wait() == -signal.SIGKILL
    try:
        until(lambda: not any(alive(pid) for pid in pids), "nvlsm and fabric manager are gone")
    finally:  # orphans left by a failure must not disturb the other tests
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------- one nvfabric run per node


def test_a_second_run_is_refused_at_once_before_anything_is_written_or_reset(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-b200")
    first = start(root)
    first.wait_line(r"fabric ready in")
    cfg = root / "run/nvfabric/fabricmanager.cfg"
    before = cfg.stat()
    for args in (("--json",), ("--json", "--gpu-reset-command", f"{root}/bin/nvidia-smi -r"),
                 ("--json", "--dry-run")):
        second = start(root, *args)
        assert second.wait() == 1
        result = second.result()
        assert (result["result"], codes(result)) == ("refused", ["already_running"])
        assert finding(result, "already_running")["pid"] == first.proc.pid
        assert f"(pid {first.proc.pid}" in result["findings"][0]["message"]
    human = start(root)
    assert human.wait() == 1
    assert f"already_running: nvfabric run is already running on this node (pid " \
           f"{first.proc.pid}" in human.log and "hint: one nvfabric run per node" in human.log
    assert len(events(root, "nvlsm", "exec")) == len(events(root, "fabricmanager", "exec")) == 1
    assert not events(root, "nvidia-smi", "reset")
    assert cfg.stat().st_mtime_ns == before.st_mtime_ns and cfg.stat().st_ino == before.st_ino
    assert first.proc.poll() is None  # the first run is untouched
    first.signal(signal.SIGTERM)
    assert first.wait() == 0


def test_the_run_lock_dies_with_the_process(tmp_path: Path, start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "dgx-a100")  # A100: no GPU reset needed to start fabric manager again
    first = start(root)
    first.wait_line(r"fabric ready in")
    first.signal(signal.SIGKILL)
    first.wait()
    # its fabric manager ends on PDEATHSIG; while it still runs, a start is refused
    # (fabric_service_running), so wait for it to be gone
    (fm,) = [e["pid"] for e in events(root, "fabricmanager", "exec")]
    until(lambda: not alive(fm), "fabric manager is gone with the run")
    second = start(root)
    second.wait_line(r"fabric ready in")  # not refused: nobody holds the lock any more
    second.signal(signal.SIGTERM)
    assert second.wait() == 0


@pytest.mark.parametrize("blocker", ["run/nvfabric", "run"])
@pytest.mark.parametrize("mode", [(), ("--dry-run",)])
def test_state_dir_that_is_a_file_is_a_clear_usage_error(
        tmp_path: Path, blocker: str, mode: tuple[str, ...]) -> None:
    root = sim(tmp_path, "dgx-b200")
    (root / blocker).parent.mkdir(parents=True, exist_ok=True)
    (root / blocker).write_text("not a directory\n", encoding="utf-8")
    proc = run_cli("run", "--root", str(root), *mode)
    assert proc.returncode == 2, proc.stderr
    assert f"--state-dir: {root / blocker} exists and is not a directory" in proc.stderr
    assert "Traceback" not in proc.stderr and not events(root, event="exec")


# ---------------------------------------------------------------- one JSON shape, versions


RUN_KEYS = {"result", "exit_code", "dry_run", "fabric", "processes", "files", "ready_after_s",
            "restarts", "findings", "reasons", "vendor_files"}


def _run_json(root: Path, *args: str) -> tuple[dict[str, Any], int]:
    proc = run_cli("run", "--root", str(root), "--json", *args)
    data = json.loads(proc.stdout)
    assert isinstance(data, dict)
    return data, proc.returncode


def test_run_json_has_one_shape_for_every_outcome(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    import yaml

    blocked = sim(tmp_path, yaml.safe_load((CASES / "P06-b200-ib-umad-missing.yaml").read_text(
        encoding="utf-8"))["node"], name="blocked")
    pcie = sim(tmp_path, "h100-pcie", name="pcie")
    b200 = sim(tmp_path, "dgx-b200", name="b200")
    mismatch = sim(tmp_path, "hgx-h100", {"fabricmanager": {"version": "550.54.15"}},
                   name="mismatch")
    crash = sim(tmp_path, "dgx-a100", {"fabricmanager": {"crash_after_s": 0.3}}, name="crash")
    seen: dict[tuple[str, bool], tuple[dict[str, Any], int]] = {}
    for root in (blocked, pcie, b200, mismatch):
        for dry in (True, False):
            if root == b200 and not dry:
                continue
            data, rc = _run_json(root, *(("--dry-run",) if dry else ()))
            seen[(data["result"], dry)] = data, rc
    failed = start(crash, "--json")
    assert failed.wait() == 1
    seen[("failed", False)] = failed.result(), 1
    ok = start(b200, "--json")
    ok.wait_line(r"fabric ready in")
    ok.signal(signal.SIGTERM)
    assert ok.wait() == 0
    seen[("stopped", False)] = ok.result(), 0
    assert sorted(seen) == sorted([
        ("blocked", True), ("blocked", False), ("nothing_to_do", True),
        ("nothing_to_do", False), ("would_start", True), ("refused", True),
        ("refused", False), ("failed", False), ("stopped", False)])
    for (result, dry), (data, rc) in seen.items():
        assert set(data) == RUN_KEYS, result
        assert (data["dry_run"], data["exit_code"]) == (dry, rc)
        assert isinstance(data["reasons"], list) and data["reasons"]
        if result in ("blocked", "nothing_to_do"):
            assert (data["processes"], data["files"]) == ([], [])
        else:
            assert data["processes"] and data["files"]
            assert data["processes"][-1]["service"] == "fabricmanager"
    assert seen[("stopped", False)][0]["ready_after_s"] > 0
    assert seen[("blocked", True)][0]["findings"] == seen[("blocked", False)][0]["findings"]
    assert codes(seen[("refused", True)][0]) == codes(seen[("refused", False)][0]) == [
        "version_mismatch"]


def test_fabric_manager_version_compares_per_field_as_fetch_does(tmp_path: Path) -> None:
    # hgx-h100 runs driver 550.90.07; 550.90.7 is the same version, printed otherwise.
    same = sim(tmp_path, "hgx-h100", {"fabricmanager": {"version": "550.90.7"}}, name="same")
    data, rc = _run_json(same, "--dry-run")
    assert (rc, data["result"], codes(data)) == (0, "would_start", [])
    other = sim(tmp_path, "hgx-h100", {"fabricmanager": {"version": "550.90.70"}}, name="other")
    data, rc = _run_json(other, "--dry-run")
    f = finding(data, "version_mismatch")
    assert rc == 1 and (f["fm_version"], f["driver_version"]) == ("550.90.70", "550.90.07")
    assert "fabric manager 550.90.70 does not match the loaded driver 550.90.07" in f["message"]


# ---------------------------------------------------------------- paths stay under --root


@pytest.mark.parametrize("args,key", [
    (("--fm-set", "LOG_FILE_NAME=/../../../x"), "LOG_FILE_NAME"),
    (("--fm-set", "STATE_FILE_NAME=/tmp/../../../x.state"), "STATE_FILE_NAME"),
])
def test_fm_set_path_with_dotdot_is_refused_like_state_dir(
        tmp_path: Path, args: tuple[str, ...], key: str) -> None:
    root = sim(tmp_path, "hgx-h100")
    for dry in ((), ("--dry-run",)):
        proc = run_cli("run", "--root", str(root), "--json", *dry, *args)
        assert proc.returncode == 2
        error = json.loads(proc.stdout)["error"]
        assert (error["code"], error["key"]) == ("config_invalid_value", key)
        assert "'..'" in error["message"]
    env = {**os.environ, "NVFM_CONFIG_" + key: args[1].split("=", 1)[1]}
    proc = run_cli("run", "--root", str(root), "--dry-run", env=env)
    assert proc.returncode == 2 and key in proc.stderr
    assert not (root / "run/nvfabric").exists() and not events(root, event="exec")


@pytest.mark.parametrize("flag", ["--fm-config", "--fm-bin", "--nvlsm-config", "--state-dir",
                                  "--fm-sm-socket", "--imex-config"])
def test_path_flags_with_dotdot_are_refused_before_anything_is_read(
        tmp_path: Path, flag: str) -> None:
    root = sim(tmp_path, "dgx-b200")
    proc = run_cli("run", "--root", str(root), "--dry-run", flag, "/../../../etc/passwd")
    assert proc.returncode == 2
    assert f"{flag} " in proc.stderr and "may not contain '..'" in proc.stderr


def test_every_path_of_the_unit_lies_under_the_root(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    data, rc = _run_json(root, "--dry-run", "--fm-set", "STATE_FILE_NAME=//tmp/./fm.state",
                         "--fm-sm-socket", "/var/run/./nvfm/ipc.sock")
    assert rc == 0, data
    paths = [a for p in data["processes"] for a in p["argv"] if a.startswith("/")]
    paths += [f["path"] for f in data["files"]]
    from nvfabric.model import keyvalue
    from nvfabric.model.fmkeys import PATH_KEYS

    cfg = keyvalue.parse(data["files"][0]["content"]).items()
    paths += [cfg[k] for k in PATH_KEYS if cfg.get(k)]
    assert len(paths) > 8
    assert [p for p in paths if not p.startswith(f"{root}/") or "/./" in p or "//" in p] == []


# ---------------------------------------------------------------- values printed literally


def test_control_characters_and_markup_from_a_daemon_are_printed_literally(
        tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100", {"fabricmanager": {"version": "550.54.15\x1b[2J[/]"}})
    shipped = root / "usr/share/nvidia/nvswitch/fabricmanager.cfg"
    shipped.write_text("# \x1b]0;title\x07 [bold]x[/]\n" + shipped.read_text(encoding="utf-8"),
                       encoding="utf-8")
    for args in ((), ("--dry-run",)):
        proc = run_cli("run", "--root", str(root), *args)
        assert proc.returncode == 1, proc.stderr
        assert "fabric manager 550.54.15\\x1b[2J[/] does not match" in proc.stderr
        out = proc.stdout + proc.stderr
        assert not any(ord(c) < 32 and c not in "\t\n" or 127 <= ord(c) < 160 for c in out)
    set_faults(str(root), {})  # a dry run that would start lists the file it would write
    proc = run_cli("run", "--root", str(root), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "  | # \\x1b]0;title\\x07 [bold]x[/]" in proc.stdout.splitlines()
