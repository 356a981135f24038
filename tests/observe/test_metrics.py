"""The metrics module as a pure function of values: a raw NVML health mask, a unit snapshot
with exits and restarts, an IMEX domain state, each rendered and linted by promtool."""

from __future__ import annotations

from nvfabric.model.findings import Finding
from nvfabric.model.health import GpuFabric
from nvfabric.model.mask import decode_mask
from nvfabric.observe.metrics import Reading, render
from nvfabric.observe.unitstate import NOTHING_TO_RUN, ServiceSnapshot, UnitSnapshot, exit_reason
from tests.cli.test_status_prometheus import promtool_check, series

#: nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*: DEGRADED_BW TRUE (1 << 0), ROUTE_RECOVERY FALSE
#: (2 << 2), ROUTE_UNHEALTHY TRUE (1 << 4), ACCESS_TIMEOUT_RECOVERY FALSE (2 << 6),
#: INCORRECT_CONFIGURATION NONE (1 << 8).
MASK = 1 | 2 << 2 | 1 << 4 | 2 << 6 | 1 << 8


def _gpu(index: int, mask: int, state: str = "completed", status: str = "success") -> GpuFabric:
    return GpuFabric(index, f"GPU-{index:08d}", f"00000000:{0x18 + index:02X}:00.0",
                     state, status, 7, "6d8e4b5a-1c2d-4e5f-8a9b-0c1d2e3f4a5b", "unhealthy",
                     decode_mask(mask), mask, "NVIDIA B200")  # type: ignore[arg-type]


def test_health_mask_fields_become_levels_fine_degraded_unhealthy() -> None:
    text = promtool_check(render(Reading("unhealthy", "nvlink5", "570.148.08",
                                         (_gpu(0, MASK),))).decode())
    health = {k.split('field="')[1].split('"')[0]: (k.split('value="')[1].split('"')[0], v)
              for k, v in series(text, "nvfabric_gpu_fabric_health").items()}
    assert health["degraded_bandwidth"] == ("true", 1.0)
    assert health["route_unhealthy"] == ("true", 2.0)
    assert health["route_recovery"] == ("false", 0.0)
    assert health["incorrect_configuration"] == ("none", 0.0)
    assert health["partition_assigned"] == ("not_supported", 0.0)


def test_unit_snapshot_gives_ready_time_restarts_and_exits_by_reason() -> None:
    unit = UnitSnapshot((
        ServiceSnapshot("nvlsm", "ready", 101, 2, (("signal", 1), ("exit_code", 1))),
        ServiceSnapshot("fabricmanager", "exited", None, 2, ()),
    ), True, 4.25, 2, "ready")
    text = promtool_check(render(Reading("healthy", "nvlink5", None, ()), unit).decode())
    assert series(text, "nvfabric_fabric_ready") == {"nvfabric_fabric_ready": 1.0}
    assert series(text, "nvfabric_fabric_time_to_ready_seconds") == {
        "nvfabric_fabric_time_to_ready_seconds": 4.25}
    assert series(text, "nvfabric_service_up") == {
        'nvfabric_service_up{service="nvlsm"}': 1.0,
        'nvfabric_service_up{service="fabricmanager"}': 0.0}
    assert series(text, "nvfabric_service_restarts_total") == {
        'nvfabric_service_restarts_total{service="nvlsm"}': 2.0,
        'nvfabric_service_restarts_total{service="fabricmanager"}': 2.0}
    exits = series(text, "nvfabric_service_exits_total")
    assert exits['nvfabric_service_exits_total{reason="signal",service="nvlsm"}'] == 1.0
    assert exits['nvfabric_service_exits_total{reason="exit_code",service="nvlsm"}'] == 1.0
    assert exits['nvfabric_service_exits_total{reason="clean",service="fabricmanager"}'] == 0.0
    assert len(exits) == 2 * 3  # every reason of every service, zero included


def test_not_ready_unit_has_no_time_to_ready_and_nothing_to_run_is_ready() -> None:
    text = render(None, UnitSnapshot(phase="starting")).decode()
    assert series(text, "nvfabric_fabric_ready") == {"nvfabric_fabric_ready": 0.0}
    assert not series(text, "nvfabric_fabric_time_to_ready_seconds")
    assert not series(text, "nvfabric_gpu_fabric_state")  # no reading yet
    assert 'nvfabric_fabric_ready 1.0' in render(None, NOTHING_TO_RUN).decode()


def test_imex_domain_state_and_findings_counts() -> None:
    findings = (Finding("imex_domain_degraded", "error", "a"),
                Finding("fabric_unhealthy", "warning", "b"),
                Finding("fabric_unhealthy", "warning", "c"))
    text = promtool_check(render(Reading("degraded", "mnnvl", None, (), findings,
                                         imex_domain="DEGRADED")).decode())
    assert series(text, "nvfabric_imex_domain_state") == {
        'nvfabric_imex_domain_state{state="UP"}': 0.0,
        'nvfabric_imex_domain_state{state="DEGRADED"}': 1.0,
        'nvfabric_imex_domain_state{state="DOWN"}': 0.0}
    assert series(text, "nvfabric_findings") == {
        'nvfabric_findings{code="fabric_unhealthy",severity="warning"}': 2.0,
        'nvfabric_findings{code="imex_domain_degraded",severity="error"}': 1.0}
    assert not series(render(Reading("healthy", "mnnvl", None, ())).decode(),
                      "nvfabric_imex_domain_state")


def test_exit_reason_words() -> None:
    assert exit_reason(None, 9) == "signal"
    assert exit_reason(0, None) == "clean"
    assert exit_reason(1, None) == "exit_code"


def test_label_values_with_quotes_and_newlines_are_escaped() -> None:
    gpu = GpuFabric(0, 'GPU-"x"\nevil', None, "in_progress", None)
    text = promtool_check(render(Reading("pending", None, 'drv"\n', (gpu,))).decode())
    assert 'UUID="GPU-\\"x\\"\\nevil"' in text
