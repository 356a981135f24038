"""The preflight of ``nvfabric run`` as pure rules (rules/preflight.py): table-driven, in
process, on snapshots built from real-shaped input (nvidia-smi captures of the corpus, the
``nv-fabricmanager --version`` line of the Fabric Manager User Guide)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nvfabric.facts.smi import parse
from nvfabric.model.findings import Finding
from nvfabric.model.health import GpuFabric, summarise_gpus
from nvfabric.rules.nodefacts import NodeFacts, RunningService, VersionRead
from nvfabric.rules.preflight import Process, fm_version, preflight
from tests.cases import CORPUS

FM = "/node/usr/bin/nv-fabricmanager"
SM = "/node/opt/nvidia/nvlsm/sbin/nvlsm"
SOCKET = "/node/var/run/nvidia-fabricmanager/fm_sm_ipc.socket"
DRIVER = "550.90.07"
#: ``nv-fabricmanager --version`` (User Guide, "Startup Options"; simulate/fakebin.py prints it)
VERSION_TEXT = "Fabric Manager version is : 550.90.07\n"

FM_PROC = Process("fabricmanager", FM, restart_needs_gpu_reset=True)
SM_PROC = Process("nvlsm", SM, ready_socket=SOCKET)


def _gpus(name: str) -> tuple[GpuFabric, ...]:
    return tuple(parse((CORPUS / "nvidia-smi" / name).read_text()).gpus)


#: 8 H100s, every fabric state completed / success (a fabric manager ran since the reset)
REGISTERED = _gpus("hgx-h100-535.161.08-nvidia-smi-q.txt")
#: one B200 still registering
IN_PROGRESS = _gpus("fabric-in-progress-580-wide-columns-gpuop2511.txt")

#: the reader's error for a hung nvidia-smi (facts/gpu.py)
UNANSWERED = "/node/bin/nvidia-smi -q -x did not answer within 15 s (killed)"

OK = NodeFacts(root="/node", executables={FM: True, SM: True}, sockets={SOCKET: False},
               fm_versions={FM: VersionRead("550.90.07", VERSION_TEXT)})


def codes(findings: tuple[Finding, ...] | list[Finding]) -> list[tuple[str, str]]:
    return [(f.code, f.severity) for f in findings]


CASES: dict[str, tuple[NodeFacts, tuple[Process, ...], bool, tuple[str, ...] | None,
                       list[tuple[str, str]]]] = {
    "nvswitch_all_good": (OK, (FM_PROC,), False, None, []),
    "nvlink5_all_good": (OK, (SM_PROC, FM_PROC), False, None, []),
    "fabric_manager_already_running": (
        replace(OK, running=(RunningService("fabricmanager", 4242, "pid file "
                                            "/var/run/nvidia-fabricmanager/nv-fabricmanager.pid"),)),
        (FM_PROC,), False, None, [("fabric_service_running", "error")]),
    "imex_running_is_not_fabric_managers_business": (
        replace(OK, running=(RunningService("imex", 7, "process nvidia-imex"),)),
        (FM_PROC,), False, None, []),
    "fm_binary_missing_skips_the_version_probe": (
        replace(OK, executables={FM: False, SM: True},
                fm_versions={FM: VersionRead("535.1.1", "")}),
        (FM_PROC,), False, None, [("binary_missing", "error")]),
    "nvlsm_missing": (replace(OK, executables={FM: True, SM: False}), (SM_PROC, FM_PROC),
                      False, None, [("nvlsm_missing", "error")]),
    "version_mismatch": (
        replace(OK, fm_versions={FM: VersionRead("535.161.08",
                                                 "Fabric Manager version is : 535.161.08")}),
        (FM_PROC,), False, None, [("version_mismatch", "error")]),
    "version_equal_numerically": (
        replace(OK, fm_versions={FM: VersionRead("550.90.7", "")}),
        (FM_PROC,), False, None, []),
    "version_unreadable": (
        replace(OK, fm_versions={FM: VersionRead(None, "nv-fabricmanager: unknown option\n")}),
        (FM_PROC,), False, None, [("version_mismatch", "error")]),
    "version_probe_failed": (
        replace(OK, fm_versions={FM: VersionRead(None, error="Exec format error")}),
        (FM_PROC,), False, None, [("binary_missing", "error")]),
    "another_subnet_manager_serves_the_socket": (
        replace(OK, sockets={SOCKET: True}), (SM_PROC, FM_PROC), False, None,
        [("sm_already_running", "error")]),
    "config_path_keys_are_reported": (
        replace(OK, config_findings=(Finding("config_invalid_value", "error", "m", "h"),)),
        (FM_PROC,), False, None, [("config_invalid_value", "error")]),
    "registered_h100_without_reset_command_is_refused": (
        replace(OK, gpus=REGISTERED), (FM_PROC,), True, None,
        [("restart_needs_gpu_reset", "error")]),
    "registered_h100_with_reset_command_is_info": (
        replace(OK, gpus=REGISTERED), (FM_PROC,), True, ("nvidia-smi", "-r"),
        [("restart_needs_gpu_reset", "info")]),
    "registered_gpus_where_no_reset_is_needed": (
        replace(OK, gpus=REGISTERED), (FM_PROC,), False, None, []),
    "gpus_still_registering_are_not_registered": (
        replace(OK, gpus=IN_PROGRESS), (FM_PROC,), True, None, []),
    "unreadable_fabric_state_is_not_taken_for_not_registered": (
        replace(OK, gpus=(), gpu_error=UNANSWERED), (FM_PROC,), True, None,
        [("restart_needs_gpu_reset", "error")]),
    "unreadable_fabric_state_with_a_reset_command_is_info": (
        replace(OK, gpus=(), gpu_error=UNANSWERED), (FM_PROC,), True, ("nvidia-smi", "-r"),
        [("restart_needs_gpu_reset", "info")]),
    "unreadable_fabric_state_where_no_reset_is_needed": (
        replace(OK, gpus=(), gpu_error=UNANSWERED), (FM_PROC,), False, None, []),
    "every_problem_once_in_order": (
        replace(OK, running=(RunningService("fabricmanager", None, "command port 6666"),),
                executables={FM: True, SM: False}, sockets={SOCKET: True},
                fm_versions={FM: VersionRead("535.161.08", "")}, gpus=REGISTERED,
                config_findings=(Finding("config_invalid_value", "error", "m", "h"),)),
        (SM_PROC, FM_PROC), True, None,
        [("fabric_service_running", "error"), ("nvlsm_missing", "error"),
         ("sm_already_running", "error"), ("version_mismatch", "error"),
         ("config_invalid_value", "error"), ("restart_needs_gpu_reset", "error")]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_preflight_case(case: str) -> None:
    facts, procs, needs_reset, reset_argv, want = CASES[case]
    pre = preflight(facts, procs, driver=DRIVER, needs_reset=needs_reset,
                    reset_argv=reset_argv)
    assert codes(pre.findings) == want
    assert pre.refused == any(sev == "error" for _, sev in want)


def test_binary_not_probed_is_missing_not_a_crash() -> None:
    pre = preflight(NodeFacts(root="/node"), (FM_PROC,), driver=DRIVER, needs_reset=False,
                    reset_argv=None)
    assert codes(pre.findings) == [("binary_missing", "error")]
    assert pre.findings[0].fields == {"service": "fabricmanager", "path": FM}


def test_version_mismatch_names_both_versions_as_published() -> None:
    (f,) = fm_version(FM, "550.90.07", VersionRead("535.161.08", ""))
    assert f.fields == {"fm_version": "535.161.08", "driver_version": "550.90.07"}
    assert "fabric manager 535.161.08 does not match the loaded driver 550.90.07" in f.message
    assert "install fabric manager 550.90.07 exactly" in f.hint


def test_unreadable_version_quotes_the_first_line_cut_to_200() -> None:
    (f,) = fm_version(FM, DRIVER, VersionRead(None, "x" * 300 + "\nsecond\n"))
    assert f.message.endswith(f"({'x' * 200})")
    assert f.fields == {"fm_version": None, "driver_version": DRIVER}


def test_version_probe_failure_keeps_the_readers_hint() -> None:
    (f,) = fm_version(FM, DRIVER, VersionRead(None, error="No such file", hint="loader"))
    assert (f.code, f.hint, f.fields) == ("binary_missing", "loader", {"path": FM})
    (g,) = fm_version(FM, DRIVER, VersionRead(None, error="No such file"))
    assert g.hint == "check the fabric manager installation"


def test_no_driver_means_no_mismatch() -> None:
    assert fm_version(FM, None, VersionRead("535.161.08", "")) == []


def test_running_fabric_manager_names_pid_and_how_it_was_found() -> None:
    facts = replace(OK, running=(RunningService("fabricmanager", None, "command port"),))
    (f,) = preflight(facts, (FM_PROC,), driver=DRIVER, needs_reset=False,
                     reset_argv=None).findings
    assert "fabric manager is already running on this node (pid unknown; command port)" \
        in f.message
    assert f.fields == {"service": "fabricmanager", "pid": None}


def test_registered_finding_carries_the_gpu_summary_and_the_reset_command() -> None:
    pre = preflight(replace(OK, gpus=REGISTERED), (FM_PROC,), driver=DRIVER,
                    needs_reset=True, reset_argv=("nvidia-smi", "-r"))
    (f,) = pre.findings
    assert pre.registered and not pre.refused
    assert f.fields == {"services": "fabricmanager", "gpus": "8 GPUs: completed x8"}
    assert "`nvidia-smi -r` resets them before fabric manager starts" in f.message


def test_an_unreadable_fabric_state_is_taken_as_registered_and_says_why() -> None:
    # R04 with R09's rule: a state that cannot be read is not "nothing registered"
    pre = preflight(replace(OK, gpus=(), gpu_error=UNANSWERED), (FM_PROC,), driver=DRIVER,
                    needs_reset=True, reset_argv=None)
    (f,) = pre.findings
    assert pre.refused and pre.registered
    assert f.fields == {"services": "fabricmanager", "gpus": "fabric state unreadable",
                        "reason": UNANSWERED}
    assert f"cannot be read ({UNANSWERED})" in f.message and "does not start it" in f.message
    with_reset = preflight(replace(OK, gpus=(), gpu_error=UNANSWERED), (FM_PROC,),
                           driver=DRIVER, needs_reset=True, reset_argv=("nvidia-smi", "-r"))
    assert with_reset.registered and not with_reset.refused


@pytest.mark.parametrize("name, ready, registered, summary", [
    ("hgx-h100-535.161.08-nvidia-smi-q.txt", True, True, "8 GPUs: completed x8"),
    ("fabric-in-progress-580-wide-columns-gpuop2511.txt", False, False,
     "1 GPU: in_progress x1"),
    ("a10-535.129.03-nvidia-smi-q.txt", False, False, None),
])
def test_summarise_gpus_on_captures(name: str, ready: bool, registered: bool,
                                    summary: str | None) -> None:
    s = summarise_gpus(_gpus(name))
    assert (s.ready, s.registered) == (ready, registered)
    if summary is not None:
        assert s.summary == summary


def test_no_gpu_state_is_an_error_not_ready() -> None:
    s = summarise_gpus(())
    assert (s.ready, s.registered, s.error) == (False, False, "no GPU fabric state could be read")


def test_completed_with_an_error_status_is_registration_error() -> None:
    bad = tuple(replace(g, status="NVML_ERROR_INSUFFICIENT_RESOURCES") if g.index == 1 else g
                for g in REGISTERED)
    s = summarise_gpus(bad)
    assert s.ready and [f.code for f in s.findings] == ["registration_error"]
    assert s.findings[0].fields == {"count": 1}
    assert s.progress == (8, 8) and len(s.registered_gpus) == 8
