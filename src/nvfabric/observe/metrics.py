"""Prometheus metrics of one node's NVLink fabric, built from values (pure: no host access).

Inputs: a :class:`Reading` (the status report's fabric kind, verdict, driver version, GPUs and
findings: :mod:`nvfabric.cli.status`, :mod:`nvfabric.model.health`) and, under ``run``, a
:class:`nvfabric.observe.unitstate.UnitSnapshot`. Output: the Prometheus text exposition format
0.0.4, rendered by the official client library (``prometheus_client``, imported only here and
only when metrics are rendered: ``plan`` and ``status --json`` never load it).

Names follow the Prometheus naming conventions (https://prometheus.io/docs/practices/naming/):
the ``nvfabric_`` prefix, base units (seconds), ``_total`` for counters, ``_info`` for an info
metric. The GPU labels are the DCGM exporter's where they mean the same (``gpu`` the NVML
index, ``UUID``, ``pci_bus_id``; dcgm-exporter ``default-counters.csv`` conventions), so a
join with ``DCGM_FI_*`` series works ``on(UUID)``. Label values come from bounded vocabularies
(states, fields, finding codes, services): no per-line or per-request series.

Series (every one has a HELP line; see docs/commands/status.md):

- ``nvfabric_build_info{version, driver_version, fabric}`` 1
- ``nvfabric_fabric_ready`` 0/1; ``nvfabric_fabric_time_to_ready_seconds`` (once ready): the
  unit's readiness under ``run``; for ``status``, that of a live ``run`` on the node (its
  readiness file), absent when no run holds the run lock
- ``nvfabric_verdict{verdict}`` 0/1, one series per verdict word
- ``nvfabric_service_up{service}`` 0/1 (``status``: read from the host's processes; ``run``:
  the unit's); ``nvfabric_service_restarts_total{service}`` and
  ``nvfabric_service_exits_total{service, reason}`` (``run`` only)
- ``nvfabric_gpu_fabric_state{gpu, UUID, pci_bus_id, state}`` 0/1, one series per state
- ``nvfabric_gpu_fabric_info{gpu, UUID, pci_bus_id, status, cluster_uuid, health_summary}`` 1
- ``nvfabric_gpu_fabric_clique_id{gpu, UUID, pci_bus_id}`` (when the GPU reports one)
- ``nvfabric_gpu_fabric_health{gpu, UUID, pci_bus_id, field, value}`` 0 fine, 1 degraded,
  2 unhealthy (:data:`nvfabric.model.mask.FIELDS`), one series per field the GPU reports
- ``nvfabric_findings{code, severity}`` findings of the reading, by code and severity
- ``nvfabric_imex_domain_state{state}`` 0/1 for UP/DEGRADED/DOWN (when the domain was read)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nvfabric import __version__
from nvfabric.model.findings import Finding
from nvfabric.model.health import STATES, GpuFabric
from nvfabric.observe.unitstate import EXIT_REASONS

if TYPE_CHECKING:
    from nvfabric.observe.unitstate import UnitSnapshot

#: The content type of the text format (what ``/metrics`` answers with).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

VERDICTS = ("healthy", "degraded", "unhealthy", "pending", "not_applicable")
IMEX_DOMAIN_STATES = ("UP", "DEGRADED", "DOWN")
GPU_LABELS = ("gpu", "UUID", "pci_bus_id")
#: ``nvfabric_gpu_fabric_health`` values by the field's impact (:mod:`nvfabric.model.mask`).
HEALTH_LEVEL = {None: 0, "degraded": 1, "unhealthy": 2}


@dataclass(frozen=True)
class Reading:
    """One reading of the fabric: what ``nvfabric status`` reports. ``verdict`` one of
    :data:`VERDICTS`; ``fabric`` the kind judged (None unknown); ``imex_domain`` the IMEX
    domain state as ``nvidia-imex-ctl -N`` printed it (None when not read); ``services``: each
    fabric service's name and whether its process runs, as ``status`` reads them from the host
    (None when not read; under ``run`` the unit snapshot says it instead); ``run_ready``: a
    live ``nvfabric run`` on the node is ready (its readiness file) or not yet, None when no
    run holds the run lock; ``ready_after_s`` as that file says."""

    verdict: str
    fabric: str | None
    driver_version: str | None
    gpus: tuple[GpuFabric, ...]
    findings: tuple[Finding, ...] = ()
    imex_domain: str | None = None
    services: tuple[tuple[str, bool], ...] | None = None
    run_ready: bool | None = None
    ready_after_s: float | None = None


def reading_of(report: Any) -> Reading:
    """The :class:`Reading` of a :class:`nvfabric.app.status.Report` (typed loosely so that
    this module does not import the CLI)."""
    services = None if report.services is None else tuple(
        (s.name, bool(s.running)) for s in report.services)
    return Reading(report.verdict.verdict, report.fabric, report.health.driver_version,
                   tuple(report.health.gpus), tuple(report.verdict.findings),
                   services=services)


def _gpu_labels(g: GpuFabric) -> list[str]:
    return [str(g.index), g.uuid or "", g.pci or ""]


def families(reading: Reading | None, unit: UnitSnapshot | None) -> list[Any]:
    """The metric families of one reading and one unit snapshot (either may be None: no
    reading yet, or not under ``run``), as ``prometheus_client`` metric family objects."""
    out: list[Any] = []
    out += _build(reading)
    if unit is not None:
        out += _unit(unit)
    elif reading is not None:
        out += _run_ready(reading)
        if reading.services is not None:
            out += _services_up(reading.services)
    if reading is not None:
        out += _verdict(reading)
        out += _gpus(reading.gpus)
        out += _findings(reading.findings)
        out += _imex(reading.imex_domain)
    return out


def _build(reading: Reading | None) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    info = GaugeMetricFamily(
        "nvfabric_build_info", "nvfabric version, loaded NVIDIA driver version and fabric "
        "kind of this node; always 1", labels=["version", "driver_version", "fabric"])
    info.add_metric([__version__, (reading.driver_version or "") if reading else "",
                     (reading.fabric or "") if reading else ""], 1)
    yield info


def _ready(ready: bool, ready_after_s: float | None) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    yield GaugeMetricFamily("nvfabric_fabric_ready", "1 while the supervised unit is ready "
                            "(the rule of READY=1: every service ready, GPUs registered)",
                            value=1 if ready else 0)
    if ready_after_s is not None:
        yield GaugeMetricFamily("nvfabric_fabric_time_to_ready_seconds", "Seconds from the "
                                "last start of the unit to ready", value=ready_after_s)


def _run_ready(reading: Reading) -> Iterator[Any]:
    if reading.run_ready is not None:
        yield from _ready(reading.run_ready, reading.ready_after_s if reading.run_ready
                          else None)


def _unit(unit: UnitSnapshot) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily

    yield from _ready(unit.ready, unit.ready_after_s)
    yield from _services_up([(s.service, s.up) for s in unit.services])
    restarts = CounterMetricFamily("nvfabric_service_restarts", "Times the service was "
                                   "started again by the restart policy", labels=["service"])
    exits = CounterMetricFamily("nvfabric_service_exits", "Unexpected exits of the service "
                                "by reason (exit_code, clean, signal)",
                                labels=["service", "reason"])

    for s in unit.services:
        restarts.add_metric([s.service], s.restarts)
        counts = dict(s.exits)
        for reason in EXIT_REASONS:
            exits.add_metric([s.service, reason], counts.get(reason, 0))
    yield from (restarts, exits)


def _services_up(services: Sequence[tuple[str, bool]]) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    up = GaugeMetricFamily("nvfabric_service_up", "1 while the fabric service's process runs",
                           labels=["service"])
    for name, running in services:
        up.add_metric([name], 1 if running else 0)
    yield up


def _verdict(reading: Reading) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    fam = GaugeMetricFamily("nvfabric_verdict", "1 for the node's current fabric verdict, "
                            "0 for the others", labels=["verdict"])
    for word in VERDICTS:
        fam.add_metric([word], 1 if reading.verdict == word else 0)
    yield fam


def _gpus(gpus: Sequence[GpuFabric]) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    state = GaugeMetricFamily("nvfabric_gpu_fabric_state", "1 for the GPU's NVLink fabric "
                              "registration state, 0 for the others",
                              labels=[*GPU_LABELS, "state"])
    info = GaugeMetricFamily(
        "nvfabric_gpu_fabric_info", "The GPU's fabric status (success or the NVML error "
        "name), ClusterUUID and health summary as labels; always 1",
        labels=[*GPU_LABELS, "status", "cluster_uuid", "health_summary"])
    clique = GaugeMetricFamily("nvfabric_gpu_fabric_clique_id", "The GPU's NVLink clique id",
                               labels=list(GPU_LABELS))
    health = GaugeMetricFamily(
        "nvfabric_gpu_fabric_health", "Health mask field of the GPU's fabric: 0 fine, "
        "1 degraded, 2 unhealthy; the decoded value as a label",
        labels=[*GPU_LABELS, "field", "value"])
    for g in gpus:
        base = _gpu_labels(g)
        for word in STATES.values():
            state.add_metric([*base, word], 1 if g.state == word else 0)
        info.add_metric([*base, g.status or "", g.cluster_uuid or "", g.health_summary or ""],
                        1)
        if g.clique_id is not None:
            clique.add_metric(base, g.clique_id)
        for f in g.health:
            if f.value is not None:
                health.add_metric([*base, f.name, f.value], HEALTH_LEVEL[f.impact])
    yield from (state, info, clique, health)


def _findings(findings: Sequence[Finding]) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    fam = GaugeMetricFamily("nvfabric_findings", "Findings of the current reading by code "
                            "and severity (docs/finding-codes.md)", labels=["code", "severity"])
    for (code, severity), n in sorted(Counter((f.code, f.severity) for f in findings).items()):
        fam.add_metric([code, severity], n)
    yield fam


def _imex(domain: str | None) -> Iterator[Any]:
    if domain is None:
        return
    from prometheus_client.core import GaugeMetricFamily

    fam = GaugeMetricFamily("nvfabric_imex_domain_state", "1 for the IMEX domain state "
                            "nvidia-imex-ctl reports (UP, DEGRADED, DOWN), 0 for the others",
                            labels=["state"])
    for word in IMEX_DOMAIN_STATES:
        fam.add_metric([word], 1 if domain.upper() == word else 0)
    yield fam


def render(reading: Reading | None, unit: UnitSnapshot | None = None) -> bytes:
    """The text exposition of :func:`families` (UTF-8 bytes, ends with a newline)."""
    from prometheus_client import CollectorRegistry, generate_latest

    class _Once:
        def collect(self) -> list[Any]:
            return families(reading, unit)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Once())
    return generate_latest(registry)
