"""The verdict rules as tables: plain GpuFabric values in, verdict word and codes out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nvfabric.model.findings import Finding
from nvfabric.model.health import ZERO_UUID, GpuFabric
from nvfabric.model.mask import HealthField
from nvfabric.model.services import ServiceState
from nvfabric.rules.verdict import Inputs, columns_needed, infer_fabric, verdict

CLUSTER = "c81d4e2a-9b3f-4a61-8d07-1e6f2b9a4c55"
CONFLICT = Finding("imex_owner_conflict", "error", "nvfabric run and the DRA driver", "keep one")
CHANNEL_MISSING = Finding("imex_channel_missing", "error", "no channel0", "mknod it")
OK = GpuFabric(0, "GPU-0", "00000000:18:00.0", "completed", "success", 0, ZERO_UUID, "healthy")
NA = GpuFabric(0, "GPU-0", "00000000:18:00.0", "not_supported", None)
REG = GpuFabric(0, "GPU-0", "00000000:18:00.0", "in_progress", None)


def gpus(template: GpuFabric, n: int = 8, **changes: object) -> tuple[GpuFabric, ...]:
    return tuple(replace(template, index=i, uuid=f"GPU-{i}", **changes)  # type: ignore[arg-type]
                 for i in range(n))


def up(*names: str, age: float | None = 600.0) -> tuple[ServiceState, ...]:
    return tuple(ServiceState(n, True, age_s=age) for n in names)


def down(*names: str) -> tuple[ServiceState, ...]:
    return tuple(ServiceState(n, False) for n in names)


FM = "fabricmanager"
SM = "nvlsm"

TABLE = [
    # (name, inputs, verdict, codes)
    ("pcie-cards-no-fabric", Inputs(gpus(NA, 2), "none"), "not_applicable", []),
    ("unknown-kind-no-fabric", Inputs(gpus(NA, 2), None), "not_applicable", []),
    ("no-gpu-at-all", Inputs((), "none"), "not_applicable", []),
    ("no-gpu-on-a-fabric-node", Inputs((), "nvswitch"), "unhealthy", ["gpu_missing_from_driver"]),
    ("nvswitch-healthy", Inputs(gpus(OK), "nvswitch", up(FM), 8), "healthy", []),
    ("nvlink5-healthy", Inputs(gpus(OK), "nvlink5", up(SM, FM), 8), "healthy", []),
    ("capture-registering", Inputs(gpus(REG), "nvlink5"), "pending", ["registration_stuck"]),
    ("live-registering-in-grace", Inputs(gpus(REG), "nvlink5", up(SM, FM, age=30), 8),
     "pending", ["registration_stuck"]),
    ("live-registering-past-grace", Inputs(gpus(REG), "nvlink5", up(SM, FM, age=900), 8),
     "unhealthy", ["registration_stuck"]),
    ("live-registering-age-unknown", Inputs(gpus(REG), "nvswitch", up(FM, age=None), 8),
     "pending", ["registration_stuck"]),
    ("registering-fm-down", Inputs(gpus(REG), "nvswitch", down(FM), 8),
     "unhealthy", ["registration_stuck"]),
    ("registering-nvlsm-down", Inputs(gpus(REG), "nvlink5", up(FM) + down(SM), 8),
     "unhealthy", ["registration_stuck"]),
    ("not-started-counts-as-registering", Inputs(gpus(REG, state="not_started"), "nvswitch"),
     "pending", ["registration_stuck"]),
    ("fabric-mode-1-no-partition", Inputs(gpus(REG), "nvswitch", up(FM, age=9000), 8,
                                          fabric_mode=1),
     "pending", ["fabric_partition_inactive"]),
    ("partial-registration", Inputs(gpus(OK, 4) + tuple(replace(REG, index=i) for i in (4, 5)),
                                    "nvswitch"),
     "pending", ["partial_registration", "registration_stuck"]),
    ("completed-not-success", Inputs((OK, replace(OK, index=1, status="NVML_ERROR_UNKNOWN")),
                                     "nvswitch"),
     "unhealthy", ["registration_error"]),
    ("summary-unhealthy", Inputs((replace(OK, health_summary="unhealthy"),), "mnnvl"),
     "unhealthy", ["fabric_unhealthy"]),
    ("limited-capacity-is-degraded", Inputs((replace(OK, health_summary="limited_capacity",
                                                     cluster_uuid=CLUSTER),), "mnnvl"),
     "degraded", ["fabric_unhealthy"]),
    ("route-recovery-is-degraded",
     Inputs((replace(OK, health=(HealthField("route_recovery", "true", "degraded"),)),),
            "nvswitch"), "degraded", ["fabric_unhealthy"]),
    ("incorrect-configuration-is-unhealthy",
     Inputs((replace(OK, health=(HealthField("incorrect_configuration", "no_partition",
                                             "unhealthy"),)),), "nvswitch"),
     "unhealthy", ["fabric_unhealthy"]),
    ("cluster-uuid-disagreement", Inputs((replace(OK, cluster_uuid=CLUSTER),
                                          replace(OK, index=1)), "mnnvl"),
     "unhealthy", ["fabric_unhealthy"]),
    ("clique-disagreement", Inputs((OK, replace(OK, index=1, clique_id=3)), "nvswitch"),
     "unhealthy", ["fabric_unhealthy"]),
    ("zero-cluster-uuid-single-node-fine", Inputs(gpus(OK), "nvswitch"), "healthy", []),
    ("zero-cluster-uuid-on-mnnvl-tray", Inputs(gpus(OK, 4), "mnnvl"),
     "unhealthy", ["fabric_unhealthy"]),
    ("mnnvl-healthy", Inputs(gpus(OK, 4, cluster_uuid=CLUSTER, clique_id=2), "mnnvl", up(),
                             4), "healthy", []),
    ("fm-down-gpus-fine", Inputs(gpus(OK), "nvswitch", down(FM), 8), "degraded",
     ["fm_inactive"]),
    ("nvlsm-down-gpus-fine", Inputs(gpus(OK), "nvlink5", up(FM) + down(SM), 8), "degraded",
     ["nvlsm_missing"]),
    ("gpu-missing-from-driver", Inputs(gpus(OK, 7), "nvswitch", up(FM), 8), "unhealthy",
     ["gpu_missing_from_driver"]),
    ("pre-hopper-nvswitch-fm-running", Inputs(gpus(NA), "nvswitch", up(FM), 8), "healthy", []),
    ("pre-hopper-nvswitch-fm-down", Inputs(gpus(NA), "nvswitch", down(FM), 8), "unhealthy",
     ["fm_inactive"]),
    ("nvlink5-reports-no-fabric", Inputs(gpus(NA), "nvlink5", up(SM, FM), 8), "unhealthy",
     ["fabric_info_not_supported"]),
    ("gb200-all-not-supported", Inputs(gpus(NA, 4), "mnnvl", up(), 4), "unhealthy",
     ["fabric_info_not_supported"]),
    # S06: Not Started next to Completed was left out: unhealthy at once, grace or not.
    ("not-started-next-to-completed-capture",
     Inputs(gpus(OK, 6) + tuple(replace(REG, index=i, state="not_started") for i in (6, 7)),
            "nvlink5"), "unhealthy", ["partial_registration"]),
    ("not-started-next-to-completed-in-grace",
     Inputs(gpus(OK, 6) + tuple(replace(REG, index=i, state="not_started") for i in (6, 7)),
            "nvlink5", up(SM, FM, age=5), 8), "unhealthy", ["partial_registration"]),
    ("in-progress-next-to-completed-past-grace",
     Inputs(gpus(OK, 6) + tuple(replace(REG, index=i) for i in (6, 7)), "nvswitch",
            up(FM, age=900), 8), "unhealthy", ["partial_registration", "registration_stuck"]),
    ("in-progress-next-to-completed-in-grace",
     Inputs(gpus(OK, 6) + tuple(replace(REG, index=i) for i in (6, 7)), "nvswitch",
            up(FM, age=20), 8), "pending", ["partial_registration", "registration_stuck"]),
    # S07: what was not read is never certified.
    ("mnnvl-completed-without-cluster-uuid-and-clique",
     Inputs(gpus(OK, 4, cluster_uuid=None, clique_id=None), "mnnvl", up(), 4), "degraded",
     ["fabric_value_missing"]),
    ("mnnvl-completed-without-clique-only",
     Inputs(gpus(OK, 4, cluster_uuid=CLUSTER, clique_id=None), "mnnvl", up(), 4), "degraded",
     ["fabric_value_missing"]),
    ("completed-status-not-read", Inputs(gpus(OK, 8, status=None), "nvswitch", up(FM), 8),
     "degraded", ["fabric_value_missing"]),
    ("single-node-cluster-values-not-needed",
     Inputs(gpus(OK, 8, cluster_uuid=None, clique_id=None), "nvswitch", up(FM), 8),
     "healthy", []),
    ("nvml-missing-on-fabric-node",
     Inputs((), "nvswitch", up(FM), 8,
            reader_findings=(Finding("nvml_unavailable", "error", "no NVML", "install"),)),
     "unhealthy", ["nvml_unavailable"]),
    ("nvml-missing-on-pcie-node",
     Inputs((), "none", (), 1, reader_findings=(Finding("nvml_unavailable", "error", "x", "y"),)),
     "not_applicable", ["nvml_unavailable"]),
    # Tester report 9(b): Completed next to Not Supported on one NVSwitch node was healthy.
    ("completed-and-not-supported-mixed",
     Inputs((OK, replace(NA, index=1, uuid="GPU-1")), "nvswitch", up(FM), 2),
     "unhealthy", ["partial_registration"]),
    # 9(c): on a GB200 tray IMEX liveness counts where the host owns IMEX, only there.
    ("mnnvl-imex-down-host-owned",
     Inputs(gpus(OK, 4, cluster_uuid=CLUSTER, clique_id=2), "mnnvl", down("imex"), 4,
            imex_owner="host"), "degraded", ["imex_not_ready"]),
    ("mnnvl-imex-up-host-owned",
     Inputs(gpus(OK, 4, cluster_uuid=CLUSTER, clique_id=2), "mnnvl", up("imex"), 4,
            imex_owner="host"), "healthy", []),
    ("mnnvl-imex-down-under-a-live-run",
     Inputs(gpus(OK, 4, cluster_uuid=CLUSTER, clique_id=2), "mnnvl", down("imex"), 4,
            imex_owner="nvfabric"), "degraded", ["imex_not_ready"]),
    # an error finding weighs unhealthy: imex_owner_conflict was degraded while an error
    ("mnnvl-two-imex-owners",
     Inputs(gpus(OK, 4, cluster_uuid=CLUSTER, clique_id=2), "mnnvl", up("imex"), 4,
            imex_owner="nvfabric", imex_findings=(CONFLICT,)),
     "unhealthy", ["imex_owner_conflict"]),
    ("mnnvl-channel-the-owner-needs-missing",
     Inputs(gpus(OK, 4, cluster_uuid=CLUSTER, clique_id=2), "mnnvl", up("imex"), 4,
            imex_owner="host", imex_findings=(CHANNEL_MISSING,)),
     "unhealthy", ["imex_channel_missing"]),
    ("nvml-missing-of-an-unknown-fabric-kind",
     Inputs((), None, reader_findings=(Finding("nvml_unavailable", "error", "no NVML", "x"),)),
     "unhealthy", ["nvml_unavailable"]),
    ("mnnvl-imex-down-dra-owned",
     Inputs(gpus(OK, 4, cluster_uuid=CLUSTER, clique_id=2), "mnnvl", down("imex"), 4,
            imex_owner="dra"), "healthy", []),
    ("mnnvl-imex-down-nobody-owns-it",
     Inputs(gpus(OK, 4, cluster_uuid=CLUSTER, clique_id=2), "mnnvl", down("imex"), 4,
            imex_owner="none"), "healthy", ["imex_not_ready"]),
]


@pytest.mark.parametrize(("inputs", "word", "codes"), [t[1:] for t in TABLE],
                         ids=[t[0] for t in TABLE])
def test_verdict_table(inputs: Inputs, word: str, codes: list[str]) -> None:
    v = verdict(inputs)
    assert v.verdict == word
    assert sorted({f.code for f in v.findings}) == sorted(codes)
    for f in v.findings:
        assert f.hint
    # no error is listed beside a better verdict: status and ready exit on it
    if any(f.severity == "error" for f in v.findings):
        assert v.verdict == "unhealthy"


def test_registration_stuck_severity_follows_the_grace_period() -> None:
    def sev(age: float) -> list[str]:
        v = verdict(Inputs(gpus(REG), "nvswitch", up(FM, age=age), 8, grace_s=120))
        return [f.severity for f in v.findings]

    assert sev(119) == ["warning"]
    assert sev(121) == ["error"]


def test_stuck_hint_names_the_cause_for_the_fabric_kind() -> None:
    def hint(kind: str | None) -> str:
        return verdict(Inputs(gpus(REG), kind)).findings[0].hint

    assert "802" in hint("nvlink5") and "NVLSM" in hint("nvlink5")
    assert "switch trays" in hint("mnnvl")
    assert "fabric manager" in hint("nvswitch") and "NVLSM" not in hint("nvswitch")
    assert "--fabric" in hint(None)


@pytest.mark.parametrize(
    ("names", "kind"),
    [
        (["NVIDIA GB200"] * 4, "mnnvl"),
        (["NVIDIA B200"] * 8, "nvlink5"),
        (["NVIDIA H100 80GB HBM3"] * 8, "nvswitch"),
    ],
)
def test_infer_fabric_from_product_names(names: list[str], kind: str) -> None:
    assert infer_fabric(tuple(replace(OK, index=i, name=n) for i, n in enumerate(names))) == kind


def test_infer_fabric_without_fabric_state_is_none() -> None:
    assert infer_fabric(gpus(NA, 2, name="NVIDIA H100 PCIe")) == "none"


@pytest.mark.parametrize("state", [OK, NA])
def test_infer_fabric_without_product_names_cannot_tell(state: GpuFabric) -> None:
    """A B200 and an H100 both report Completed: without a name neither is a guess."""
    assert infer_fabric(gpus(state, 8, name=None)) is None


# Tester report 9(e): a no-GPU node (plan none) was not_applicable yet carried an ERROR
# telling the operator to install NVML.
def test_reader_errors_on_a_node_without_fabric_are_information() -> None:
    v = verdict(Inputs((), "none", (), 0, reader_findings=(
        Finding("nvml_unavailable", "error", "no NVML", "install NVML"),)))
    assert v.verdict == "not_applicable"
    assert [(f.code, f.severity) for f in v.findings] == [("nvml_unavailable", "info")]
    assert "no NVLink fabric" in v.findings[0].hint


def test_imex_owned_elsewhere_says_why_it_is_not_judged() -> None:
    v = verdict(Inputs(gpus(OK, 4, cluster_uuid=CLUSTER, clique_id=2), "mnnvl", down("imex"),
                       4, imex_owner="slurm"))
    assert any("owned by slurm" in r for r in v.reasons)


def test_left_out_counts_every_gpu_read_not_only_the_finished_ones() -> None:
    """8 GPUs: 6 Completed, one In Progress, one Not Started: '1 of 8' (before: '1 of 7',
    the In Progress GPU dropped from the count)."""
    v = verdict(Inputs(gpus(OK, 6) + (replace(REG, index=6),
                                      replace(REG, index=7, state="not_started")), "nvlink5"))
    (left,) = [f for f in v.findings if f.code == "partial_registration"
               and f.severity == "error"]
    assert left.message.startswith("1 of 8 GPUs were left out of fabric registration (GPUs 7 ")
    assert "while 6 completed" in left.message and left.fields["gpus"] == [7]


# A capture judged on what it has (S08, S09 and a GB300 CSV without cliqueId/clusterUuid):
# which columns the verdict of the rows reads, per state and fabric kind.
CLIQUE = ("fabric.cliqueId", "fabric.clusterUuid")
DONE_FAILED = replace(OK, index=1, status="NVML_ERROR_UNKNOWN")


@pytest.mark.parametrize(("rows", "fabric", "needed"), [
    (gpus(REG, 4), "mnnvl", ()),  # every GPU In Progress: nothing but the state
    (gpus(replace(REG, state="not_started"), 4), "nvlink5", ()),
    (gpus(NA, 2), None, ()),
    ((OK, DONE_FAILED), "nvswitch", ("fabric.status",)),
    (gpus(OK, 2), "nvlink5", ("fabric.status",)),
    (gpus(OK, 2), "mnnvl", ("fabric.status", *CLIQUE)),
    (gpus(OK, 2), None, ("fabric.status", *CLIQUE)),  # the kind only guessed from states
    ((OK, replace(REG, index=1)), "mnnvl", ("fabric.status", *CLIQUE)),
], ids=["in-progress-tray", "not-started", "no-fabric", "s09-completed", "nvlink5-completed",
        "tray-completed", "unknown-kind-completed", "tray-one-completed"])
def test_columns_needed_follow_the_rows(rows: tuple[GpuFabric, ...], fabric: str | None,
                                        needed: tuple[str, ...]) -> None:
    got = columns_needed(rows, fabric)  # type: ignore[arg-type]
    assert tuple(got) == needed
    if needed:
        assert got["fabric.status"].startswith("Completed GPU")
        assert "0" in got["fabric.status"]


def test_columns_not_needed_are_one_information_finding_and_change_no_verdict() -> None:
    base = verdict(Inputs(gpus(REG, 4), "mnnvl"))
    v = verdict(Inputs(gpus(REG, 4), "mnnvl", unread_columns=CLIQUE))
    assert v.verdict == base.verdict == "pending"
    (f,) = [f for f in v.findings if f.code == "capture_column_missing"]
    assert f.severity == "info" and f.fields["columns"] == list(CLIQUE)
    assert "fabric.cliqueId, fabric.clusterUuid" in f.message and "not checked" not in f.message
    ok = verdict(Inputs(gpus(OK, 2), "nvswitch", unread_columns=CLIQUE))
    assert ok.verdict == "healthy"
    (f,) = [f for f in ok.findings if f.code == "capture_column_missing"]
    assert "NVLink domain was not checked" in f.message
