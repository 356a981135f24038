"""The words of nvfabric as types: fabric kinds, services, verdicts, severities, GPU fabric
states, health summaries and finding codes: the words of the project's vocabulary.

Each is a :data:`typing.Literal`, so ``Finding(code="nvlsm_mising", ...)``, ``plan.fabric ==
"nvlnk5"`` or a verdict of ``"healthy!"`` is a ``mypy --strict`` error (``arg-type``,
``comparison-overlap``), not a surprise at run time. Values that arrive as text (a YAML row, a
JSON report, a command line) are narrowed with the ``is_*`` guards below, which check against
the same words. Pure: no I/O, imports nothing of nvfabric.

Sources: fabric kinds, services and verdicts from DESIGN.md; GPU fabric states from nvml.h
``NVML_GPU_FABRIC_STATE_*``; health summaries from nvml.h
``NVML_GPU_FABRIC_HEALTH_SUMMARY_*`` (v3 fabric info, driver 550+).
"""

from __future__ import annotations

from typing import Final, Literal, TypeGuard, get_args

#: What a node's NVLink fabric needs: ``none`` (PCIe, NVLink bridge, C2C only, one GPU),
#: ``nvswitch`` (NVSwitch gen 1-3 on PCI: fabric manager), ``nvlink5`` (B100/B200/B300
#: baseboards: NVLSM then fabric manager), ``mnnvl`` (GB200/GB300 compute tray: IMEX).
FabricKind = Literal["none", "nvswitch", "nvlink5", "mnnvl"]

#: The daemons nvfabric starts, in start order within a plan.
Service = Literal["nvlsm", "fabricmanager", "imex"]

#: A node's verdict (``nvfabric status``).
VerdictWord = Literal["healthy", "degraded", "unhealthy", "pending", "not_applicable"]

#: A finding's severity.
Severity = Literal["info", "warning", "error"]

#: Per-GPU fabric state (nvml.h NVML_GPU_FABRIC_STATE_*).
FabricState = Literal["not_supported", "not_started", "in_progress", "completed"]

#: Per-GPU health summary (nvml.h NVML_GPU_FABRIC_HEALTH_SUMMARY_*); None where N/A.
HealthSummary = Literal["healthy", "unhealthy", "limited_capacity", "not_supported"]

#: Every finding code nvfabric may emit. Extend, never rename: operators alert on these.
#: Every code has a line in docs/finding-codes.md, generated with its meaning from docs/codes.yaml
#: (`make docs-codes`; tests/meta/test_docs.py).
FindingCode = Literal[
    # The founding catalogue.
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
    "interrupted",
    # Added by the health and diagnosis module (README "Finding codes").
    "nvml_function_not_found",
    "fabric_info_not_supported",
    "fabric_partition_inactive",
    "nvswitch_nonfatal_error",
    "nvswitch_not_visible",
    "imex_memory_export_failed",
    # Artifacts (README "Version-matched artifacts").
    "download_failed",
    "archive_unsafe",
    "install_failed",
    # The systemd unit (README "Running as a service").
    "unit_not_installed",
    # Telling the cluster (docs/kubernetes-publish.md).
    "kube_publish_failed",
    # IMEX and the fleet check (README "IMEX on GB200/GB300 trays").
    "imex_channel_permissions",
    "imex_channel_stray",
    "imex_ctl_timeout",
    "imex_domain_degraded",
    "imex_not_ready",
    "imex_node_config_rewritten",
    "domain_cluster_uuid_split",
    "domain_clique_split",
    "domain_gpus_not_attached",
    "domain_node_left_out",
    "domain_not_nvlink_domain",
    "domain_report_missing",
    "domain_size_mismatch",
    "domain_report_duplicate",
    # The GB200/GB300 image flow (README "Version-matched artifacts").
    "component_not_for_fabric",
    "dependency_forced",
    "dependency_unsatisfied",
    # Field truth, round 2 (README "Finding codes").
    "nvlink_xid_error",
    "nvlink_training_warning",
    "fabric_value_missing",
    "package_file_missing",
    # What the platform hides (README "Finding codes"): a guest without its NVSwitches, a
    # capture without a column its verdict did not need.
    "sxm_gpus_without_nvswitch",
    "capture_column_missing",
    # Bug report triage (README "nvfabric triage").
    "fm_on_compute_tray",
    "management_port_mismatch",
    "report_truncated",
    "report_section_missing",
    # What applications print (NCCL, PyTorch, CUDA programs; README "Finding codes").
    "nvls_multicast_exhausted",
    "cuda_fabric_not_ready",
    "cuda_nvlink_uncorrectable",
    "cuda_error_contained",
    # Hardening round 3 (README "Finding codes").
    "architecture_mismatch",
    "management_port_unverified",
    "driver_version_unreadable",
    # Bounded children (README "What the readers refuse").
    "probe_limit",
    # Watching after bring-up: the kernel log, the newest fabric info (docs/watching.md).
    "kernel_log_dropped",
    "kernel_log_unreadable",
    "gpu_recovery_action",
    # What the IMEX owner reader could not read whole (docs/imex.md).
    "imex_owner_unknown",
    # An option of a part of the bring-up the node's fabric does not run (docs/commands/run.md).
    "option_not_for_fabric",
    # GPUs, or GPUs and NVSwitches, of no one baseboard NVIDIA ships (docs/commands/plan.md).
    "baseboard_mixed",
]

#: A GPU fabric clique's type (nvml.h ``NVML_GPU_FABRIC_CLIQUE_TYPE_*``, nvmlGpuFabricInfo_v4_t,
#: NVML 615): the reach of a pointer (unicast, multicast) or of a logical endpoint (handle).
CliqueType = Literal["unicast_pointer", "multicast_pointer", "unicast_logical_endpoint",
                     "multicast_logical_endpoint"]

#: What the driver asks before a GPU may be used again (nvml.h ``nvmlDeviceGpuRecoveryAction_t``,
#: field ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``; NVIDIA "Error Recovery and Response Flags").
RecoveryAction = Literal["none", "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset",
                         "recover_imex_domain", "bus_reset", "system_reboot"]

FABRIC_KINDS: Final[tuple[FabricKind, ...]] = get_args(FabricKind)
CLIQUE_TYPES: Final[tuple[CliqueType, ...]] = get_args(CliqueType)
RECOVERY_ACTIONS: Final[tuple[RecoveryAction, ...]] = get_args(RecoveryAction)
SERVICES: Final[tuple[Service, ...]] = get_args(Service)
VERDICTS: Final[tuple[VerdictWord, ...]] = get_args(VerdictWord)
SEVERITIES: Final[tuple[Severity, ...]] = get_args(Severity)
FABRIC_STATES: Final[tuple[FabricState, ...]] = get_args(FabricState)
HEALTH_SUMMARIES: Final[tuple[HealthSummary, ...]] = get_args(HealthSummary)

#: The fabric kinds whose node runs fabric manager (NVSwitch on PCI, NVLink 5 baseboards).
FM_FABRICS: Final[frozenset[FabricKind]] = frozenset({"nvswitch", "nvlink5"})
#: The fabric kinds with no local fabric manager (nothing to manage; IMEX on a tray).
NO_FM_FABRICS: Final[frozenset[FabricKind]] = frozenset({"none", "mnnvl"})


def is_fabric_kind(word: object) -> TypeGuard[FabricKind]:
    """True when ``word`` is one of :data:`FABRIC_KINDS` (a value read from text)."""
    return word in FABRIC_KINDS


def is_service(word: object) -> TypeGuard[Service]:
    """True when ``word`` is one of :data:`SERVICES`."""
    return word in SERVICES


def is_severity(word: object) -> TypeGuard[Severity]:
    """True when ``word`` is one of :data:`SEVERITIES`."""
    return word in SEVERITIES


def is_health_summary(word: object) -> TypeGuard[HealthSummary]:
    """True when ``word`` is one of :data:`HEALTH_SUMMARIES`."""
    return word in HEALTH_SUMMARIES
