"""The cluster's view (nvfabric.rules.cluster), table-driven: which condition, reason and
message each verdict and run fault gives, the labels, the taint, the Events, node-problem-
detector's answer."""

from __future__ import annotations

import pytest

from nvfabric.model.findings import Finding
from nvfabric.rules import cluster
from nvfabric.rules.cluster import FabricView, conditions

PARTIAL = Finding("partial_registration", "error", "GPU 3 reports no fabric state",
                  "reset GPU 3\nthen run again")
NVLSM = Finding("nvlsm_missing", "warning", "NVLSM is not running", "start it")
FM = Finding("fm_inactive", "warning", "fabric manager is not running", "start it")
CRASH = Finding("service_exited", "error", "nvlsm (pid 7) killed by SIGKILL after the fabric "
                "was ready", "read the last lines", {"service": "nvlsm", "phase": "x"})
REFUSED = Finding("restart_needs_gpu_reset", "error", "fabricmanager would be restarted",
                  "rerun with --gpu-reset-command")
UUID = "4b9b0f3c-1d2e-4f5a-9b8c-7d6e5f4a3b2c"

CASES = [
    # (case, view, Unhealthy (status, reason), Degraded (status, reason))
    ("healthy", FabricView("healthy", fabric="nvlink5"),
     ("False", "FabricHealthy"), ("False", "FabricHealthy")),
    ("not_applicable", FabricView("not_applicable", fabric="none"),
     ("False", "FabricNotApplicable"), ("False", "FabricNotApplicable")),
    ("degraded: the first warning decides", FabricView("degraded", (NVLSM, FM), "nvlink5"),
     ("False", "FabricDegraded"), ("True", "NvlsmMissing")),
    ("unhealthy: the first error decides", FabricView("unhealthy", (NVLSM, PARTIAL)),
     ("True", "PartialRegistration"), ("False", "FabricUnhealthy")),
    ("pending within its grace", FabricView("pending"),
     ("Unknown", "FabricPending"), ("Unknown", "FabricPending")),
    ("no reading", FabricView(None, read_error="NVML timed out"),
     ("Unknown", "NoReading"), ("Unknown", "NoReading")),
    ("the run is bringing the fabric up", FabricView("pending", starting=True),
     ("Unknown", "FabricStarting"), ("Unknown", "FabricStarting")),
    ("a service of the run exited: named by the service's code",
     FabricView("degraded", (FM, NVLSM), "nvlink5", fault=CRASH),
     ("True", "NvlsmMissing"), ("False", "FabricUnhealthy")),
    ("a refused restart", FabricView("healthy", fault=REFUSED),
     ("True", "RestartNeedsGpuReset"), ("False", "FabricUnhealthy")),
    ("the run stopped", FabricView("healthy", stopped=True),
     ("Unknown", "NvfabricStopped"), ("Unknown", "NvfabricStopped")),
]


@pytest.mark.parametrize(("view", "unhealthy", "degraded"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_conditions_by_verdict_and_fault(view: FabricView, unhealthy: tuple[str, str],
                                         degraded: tuple[str, str]) -> None:
    bad, deg = conditions(view)
    assert (bad.type, deg.type) == ("NVLinkFabricUnhealthy", "NVLinkFabricDegraded")
    assert (bad.status, bad.reason) == unhealthy
    assert (deg.status, deg.reason) == degraded
    for c in (bad, deg):
        assert "\n" not in c.message and 0 < len(c.message) <= cluster.MESSAGE_MAX


def test_the_message_is_one_line_with_the_hint() -> None:
    bad, _ = conditions(FabricView("unhealthy", (PARTIAL,)))
    assert bad.message == "GPU 3 reports no fabric state (hint: reset GPU 3 then run again)"
    long = Finding("partial_registration", "error", "x" * 5000)
    assert len(conditions(FabricView("unhealthy", (long,)))[0].message) == cluster.MESSAGE_MAX


@pytest.mark.parametrize(("code", "reason"), [
    ("partial_registration", "PartialRegistration"), ("nvlsm_missing", "NvlsmMissing"),
    ("fm_inactive", "FmInactive"), ("imex_owner_conflict", "ImexOwnerConflict"),
    ("nvlink_xid_error", "NvlinkXidError")])
def test_camel_case_of_finding_codes(code: str, reason: str) -> None:
    assert cluster.camel(code) == reason


def test_tray_labels_say_mnnvl_the_owner_and_the_clique() -> None:
    view = FabricView("healthy", fabric="mnnvl", imex_owner="dra-host",
                      cliques=(f"{UUID}.32766",) * 4)
    assert cluster.labels(view) == {"nvfabric.io/fabric": "mnnvl",
                                    "nvfabric.io/imex-owner": "dra",
                                    "nvfabric.io/clique": f"{UUID}.32766"}
    assert cluster.labels(view, gpu_clique=True)["nvidia.com/gpu.clique"] == f"{UUID}.32766"


@pytest.mark.parametrize(("cliques", "value"), [
    ((), None),
    ((f"{UUID}.1", f"{UUID}.2"), None),  # GPUs disagree: GPU feature discovery writes none
    (("00000000-0000-0000-0000-000000000000.0",) * 8, None),  # single-node NVSwitch
    (("not-a-uuid.1",), None),
    ((f"{UUID}.7",) * 2, f"{UUID}.7"),
])
def test_clique_only_when_one_real_domain(cliques: tuple[str, ...], value: str | None) -> None:
    assert cluster.clique(FabricView("healthy", fabric="mnnvl", cliques=cliques)) == value


def test_labels_on_a_baseboard_remove_the_tray_labels_and_a_failed_read_changes_none() -> None:
    assert cluster.labels(FabricView("healthy", fabric="nvlink5")) == {
        "nvfabric.io/fabric": "nvlink5", "nvfabric.io/imex-owner": None,
        "nvfabric.io/clique": None}
    assert cluster.labels(FabricView(None, read_error="boom")) == {}


def test_taint_while_unhealthy_only() -> None:
    bad, _ = conditions(FabricView("unhealthy", (PARTIAL,)))
    assert cluster.taint(bad) == "PartialRegistration"
    for view in (FabricView("healthy"), FabricView("degraded", (NVLSM,)), FabricView("pending")):
        assert cluster.taint(conditions(view)[0]) is None


def test_transition_events_warn_on_the_way_down_only() -> None:
    down = FabricView("healthy", fault=CRASH)
    event = cluster.transition_event("healthy", down, conditions(down)[0])
    assert event is not None and event.type == "Warning" and event.reason == "FabricUnhealthy"
    assert event.message.startswith("NVLink fabric verdict healthy -> unhealthy: nvlsm (pid 7)")
    up = FabricView("healthy")
    back = cluster.transition_event("unhealthy", up, conditions(up)[0])
    assert back is not None and (back.type, back.reason) == ("Normal", "FabricHealthy")
    assert cluster.transition_event("healthy", up, conditions(up)[0]) is None


def test_finding_events_are_the_errors_and_the_fault() -> None:
    view = FabricView("unhealthy", (NVLSM, PARTIAL), fault=CRASH)
    assert [(e.reason, e.type) for e in cluster.finding_events(view)] == [
        ("PartialRegistration", "Warning"), ("NvlsmMissing", "Warning")]


@pytest.mark.parametrize(("view", "condition", "code", "start"), [
    (FabricView("healthy", fabric="nvlink5"), cluster.UNHEALTHY, 0, "FabricHealthy: "),
    (FabricView("unhealthy", (PARTIAL,)), cluster.UNHEALTHY, 1, "PartialRegistration: GPU 3"),
    (FabricView("pending"), cluster.UNHEALTHY, 3, "FabricPending: "),
    (FabricView("degraded", (NVLSM,)), cluster.DEGRADED, 1, "NvlsmMissing: "),
    (FabricView("degraded", (NVLSM,)), cluster.UNHEALTHY, 0, "FabricDegraded: "),
])
def test_npd_answer(view: FabricView, condition: str, code: int, start: str) -> None:
    got, line = cluster.npd_answer(view, condition)
    assert got == code and line.startswith(start)
    assert len(line) <= cluster.NPD_LINE_MAX and "\n" not in line
