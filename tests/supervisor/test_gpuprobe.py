"""The supervisor's GPU probe in a short-lived child (issue 15: nothing of the reading stays in
the supervisor): the same answer as in-process on simulated nodes, a hung nvidia-smi or child
bounded and killed, an exception reported as in-process, the child gone with its parent."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nvfabric.facts.gpu import SMI_TIMEOUT_S
from nvfabric.facts.gpu import check as gpu_check
from nvfabric.model.gpucheck import GpuCheck
from nvfabric.simulate.fakes import set_faults
from nvfabric.supervisor.gpuprobe import (
    CHILD_BOUND_S,
    check_from_json,
    check_to_json,
    in_child,
)
from nvfabric.supervisor.lean import gpu_check_in_child
from tests import runkit
from tests.runkit import Run, alive, sim, stop_pids, until


def _set_gpus(root: Path, **values: str) -> None:
    path = root / "var/lib/nvfabric-sim/gpus.json"
    data = json.loads(path.read_text())
    for gpu in data["gpus"]:
        gpu.update(values)
    data["gpus"][2]["status"] = "NVML_ERROR_INSUFFICIENT_RESOURCES"
    path.write_text(json.dumps(data))


def _pids_under(root: Path, program: str = "nvidia-smi") -> list[int]:
    """Live processes whose command line names ``root`` and ``program``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if str(root).encode() in cmdline and program.encode() in cmdline \
                and alive(int(entry)):
            out.append(int(entry))
    return out


@pytest.mark.parametrize(("profile", "summary", "ready"), [
    ("dgx-b200", "8 GPUs: not_started x8", False),
    ("dgx-a100", "8 GPUs: not_supported x8", False),
    ("gb200-tray", "4 GPUs: completed x4", True),
    ("no-gpu", "no GPU fabric state", False),
])
def test_the_child_answers_as_the_probe_in_process(tmp_path: Path, profile: str, summary: str,
                                                   ready: bool) -> None:
    root = sim(tmp_path, profile)
    here = gpu_check(str(root))
    assert (here.summary, here.ready) == (summary, ready)
    assert gpu_check_in_child(str(root)) == here


def test_findings_and_progress_cross_the_pipe_unchanged(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    _set_gpus(root, state="completed", status="Success")
    here = gpu_check(str(root))
    assert here.ready and here.progress == (8, 8) and len(here.registered_gpus) == 8
    assert [f.code for f in here.findings] == ["registration_error"]
    assert gpu_check_in_child(str(root)) == here
    assert check_from_json(json.loads(json.dumps(check_to_json(here)))) == here


def test_a_root_without_nvidia_smi_is_the_same_answer_in_the_child(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    (root / "bin/nvidia-smi").unlink()
    assert gpu_check_in_child(str(root)) == gpu_check(str(root)) == GpuCheck(
        False, False, "no GPU fabric state", "no GPU fabric state could be read")


def test_the_probe_bound_covers_the_readings_own() -> None:
    assert CHILD_BOUND_S > SMI_TIMEOUT_S  # a hung nvidia-smi is answered by the child itself


def test_a_hung_nvidia_smi_is_killed_with_the_child_at_the_bound(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200", {"nvidia-smi": {"hang": True}})
    try:
        t0 = time.monotonic()
        answer = gpu_check_in_child(str(root), bound_s=1.0)
        took = time.monotonic() - t0
        assert answer == GpuCheck(False, False, "unreadable",
                                  "the GPU probe did not answer within 1 s (killed)")
        assert took < 10  # a bound, not a timing: the 3600 s hang was not waited for
        # the child's nvidia-smi (its own session) died with the child (PR_SET_PDEATHSIG)
        until(lambda: not _pids_under(root), "the hung nvidia-smi gone")
    finally:
        stop_pids(lambda: _pids_under(root))


def test_the_readings_own_bound_answers_from_the_child(tmp_path: Path) -> None:
    # a hung nvidia-smi is killed by the reading's own bound (facts.gpu, SMI_TIMEOUT_S in the
    # supervisor; 1 s here) inside the child, whose answer is the in-process one
    root = sim(tmp_path, "dgx-b200", {"nvidia-smi": {"hang": True}})

    def bounded() -> GpuCheck:
        from nvfabric.facts.gpu import read_health
        from nvfabric.model.health import summarise_gpus

        return summarise_gpus(read_health(str(root), timeout=1.0).gpus)

    try:
        assert in_child(bounded, bound_s=30) == GpuCheck(
            False, False, "no GPU fabric state", "no GPU fabric state could be read")
        until(lambda: not _pids_under(root), "the hung nvidia-smi killed")
    finally:
        stop_pids(lambda: _pids_under(root))


def test_an_exception_in_the_child_is_the_answer_unreadable() -> None:
    def broken() -> GpuCheck:
        raise RuntimeError("NVML said no")

    assert in_child(broken) == GpuCheck(False, False, "unreadable", "RuntimeError: NVML said no")


def test_a_child_that_dies_without_an_answer_is_unreadable() -> None:
    def dies() -> GpuCheck:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("not reached")

    assert in_child(dies) == GpuCheck(False, False, "unreadable",
                                      "the GPU probe ended without an answer")


def test_the_childs_exit_is_collected() -> None:
    mine = str(os.getpid()).encode()
    in_child(lambda: GpuCheck(True, True, "1 GPU: completed x1"))
    zombies = []
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if entry.isdigit() and fields[0] == b"Z" and fields[1] == mine:
            zombies.append(entry)
    assert not zombies


def test_the_child_dies_with_its_parent(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    script = (
        "import os, sys, time\n"
        "from nvfabric.supervisor.gpuprobe import in_child\n"
        "def hang():\n"
        f"    open({str(marker)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(3600)\n"
        "in_child(hang, 3600)\n")
    parent = runkit.Child([sys.executable, "-c", script])
    child = 0
    try:
        until(lambda: marker.exists() and marker.read_text().isdigit(), "the probe child")
        child = int(marker.read_text())
        assert alive(child)
        parent.signal(signal.SIGKILL)  # no code of the parent runs
        parent.wait()
        until(lambda: not alive(child), "the probe child gone with its parent")
    finally:
        parent.close()
        if child:
            stop_pids(lambda: [child] if alive(child) else [])


@pytest.mark.parametrize("raw", [
    [], {"ready": True}, {**check_to_json(GpuCheck(True, True, "x")), "ready": "yes"},
    {**check_to_json(GpuCheck(True, True, "x")), "progress": [1]},
    {**check_to_json(GpuCheck(True, True, "x")), "findings": [{"code": "no_such_code",
                                                                "severity": "error",
                                                                "message": "m", "hint": "",
                                                                "fields": {}}]},
])
def test_an_answer_not_of_the_childs_form_is_refused(raw: object) -> None:
    with pytest.raises((ValueError, KeyError, TypeError)):
        check_from_json(raw)


def test_a_run_stopped_while_its_probe_hangs_leaves_no_probe_behind(
        tmp_path: Path, start: Callable[..., Run]) -> None:
    # GPUs that do not register, so the lean supervisor keeps probing; then nvidia-smi hangs
    slow = {"fabricmanager": {"register_delay_s": 300}}
    root = sim(tmp_path, "dgx-b200", slow)
    run = start(root, "--json")
    try:
        run.wait_line(r"started fabricmanager")
        set_faults(str(root), {**slow, "nvidia-smi": {"hang": True}})
        until(lambda: bool(_pids_under(root)), "a probe's nvidia-smi hanging")
        run.signal(signal.SIGTERM)
        # the stop is not held up by the hung probe (its own bound is 15 s, the child's 20 s)
        assert run.wait() == 0 and run.result()["result"] == "stopped"
        # the probe child died with the supervisor, its nvidia-smi with the child (both by
        # PR_SET_PDEATHSIG), long before either bound
        until(lambda: not _pids_under(root), "the hung nvidia-smi gone")
    finally:
        stop_pids(lambda: _pids_under(root))


def test_an_answer_past_the_cap_is_unreadable_and_the_child_killed() -> None:
    # The probe child's answer is read as every child's output is: bounded in bytes.
    from nvfabric.supervisor.gpuprobe import ANSWER_MAX_BYTES

    huge = GpuCheck(False, False, "x", "y" * (ANSWER_MAX_BYTES + 1))
    got = in_child(lambda: huge)
    assert (got.ready, got.summary) == (False, "unreadable")
    assert got.error == f"the GPU probe wrote more than {ANSWER_MAX_BYTES >> 20} MiB (killed)"
