"""Findings: the one shape in which nvfabric reports a problem or a fact to the operator.

A finding has a stable ``code`` from the catalogue below (codes are extended, never renamed;
the list is the contract of ../shared/DESIGN.md), a ``severity``, a one-line ``message`` and a
``hint`` saying what to do. Extra fields (``fm_version``, ``driver_version``, ``count`` ...)
ride along in ``fields`` and are flattened into the JSON object.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["info", "warning", "error"]

#: Every finding code nvfabric may emit. Adding is fine; renaming breaks operators' alerting.
CODES: frozenset[str] = frozenset(
    {
        "fm_not_applicable",
        "nvlsm_missing",
        "version_mismatch",
        "missing_kernel_module",
        "ib_stack_missing",
        "management_port_not_found",
        "launcher_cli_mismatch",
        "config_invalid_value",
        "topology_file_missing",
        "nvswitch_topology_mismatch",
        "nvswitch_fatal_error",
        "multicast_team_failure",
        "sm_already_running",
        "registration_stuck",
        "registration_error",
        "fabric_unhealthy",
        "partial_registration",
        "gpu_missing_from_driver",
        "fm_inactive",
        "imex_no_local_interface",
        "imex_session_in_use",
        "imex_channel_missing",
        "imex_owner_conflict",
        "driver_not_loaded",
        "artifact_not_available",
        "checksum_mismatch",
        # Added by nvfabric beyond the founding catalogue (see README "Finding codes").
        "binary_missing",
        "socket_timeout",
        "service_exited",
        "restart_needs_gpu_reset",
        "already_running",
        "run_not_ready",
        "disk_full",
        "restart_limit",
        "fabric_service_running",
        "nvml_unavailable",
        "input_unreadable",
        "internal_error",
        # Added by the health and diagnosis module (README "Finding codes").
        "nvml_function_not_found",
        "fabric_info_not_supported",
        "fabric_partition_inactive",
        "nvswitch_nonfatal_error",
        "nvswitch_not_visible",
        "imex_memory_export_failed",
        # Artifacts (issue 5; README "Version-matched artifacts").
        "download_failed",
        "archive_unsafe",
        "install_failed",
        # The systemd unit (issue 12; README "Running as a service").
        "unit_not_installed",
        # IMEX and the fleet check (issue 6; README "IMEX on GB200/GB300 trays").
        "imex_channel_permissions",
        "imex_channel_stray",
        "imex_ctl_timeout",
        "imex_domain_degraded",
        "imex_not_ready",
        "imex_node_config_rewritten",
        "domain_cluster_uuid_split",
        "domain_clique_split",
        "domain_gpus_not_attached",
        "domain_not_nvlink_domain",
        "domain_report_missing",
        "domain_size_mismatch",
        "domain_report_duplicate",
        # The GB200/GB300 image flow (issue 17; README "Version-matched artifacts").
        "component_not_for_fabric",
        "dependency_forced",
        "dependency_unsatisfied",
        # Field truth round 2 (issue 9; README "Finding codes").
        "nvlink_xid_error",
        "nvlink_training_warning",
        "fabric_value_missing",
        "package_file_missing",
        # Bug report triage (issue 16; README "nvfabric triage").
        "fm_on_compute_tray",
        "management_port_mismatch",
        "report_truncated",
        "report_section_missing",
    }
)


@dataclass(frozen=True)
class Finding:
    """One diagnosed fact.

    ``code`` must be in :data:`CODES` (checked at construction, ValueError otherwise);
    ``fields`` holds extra JSON-serialisable values (strings, numbers, lists) specific to the
    code, e.g. ``{"fm_version": "550.54.15", "driver_version": "550.90.07"}``.
    """

    code: str
    severity: Severity
    message: str
    hint: str = ""
    fields: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unknown finding code {self.code!r}")
        if self.severity not in ("info", "warning", "error"):
            raise ValueError(f"unknown severity {self.severity!r}")

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the public contract: code, severity, message, hint + fields."""
        out: dict[str, Any] = {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "hint": self.hint,
        }
        for key, value in self.fields.items():
            out.setdefault(key, value)
        return out
