"""The verdict: can CUDA use this node's NVLink fabric? Pure rules over the plan's fabric kind,
the services' liveness and every GPU's fabric registration. No I/O, no clock: elapsed times
come in as numbers.

Rules (from the field cases tests/data/cases/S*.yaml, the copy of ../shared/cases, and the
NVIDIA Fabric Manager User Guide, "GPU fabric registration" / "NVLink 5"):

- No fabric reported (state not_supported / N/A everywhere) where the fabric kind is ``none``
  (or unknown) -> ``not_applicable`` (S01: PCIe cards are never "unhealthy").
- ``in_progress`` / ``not_started`` -> ``pending`` while the services that register GPUs have
  run for less than the grace period, or when that cannot be known (a saved capture, S02);
  past the grace period, or with those services not running -> ``registration_stuck``
  (unhealthy). CUDA returns error 802 (system not yet initialized) until registration ends.
  FABRIC_MODE=1 (shared NVSwitch) with no partition assigned -> pending (information).
- ``completed`` with a status other than success -> ``registration_error`` naming the GPU (S03).
- Health summary unhealthy, route unhealthy or an incorrect configuration ->
  ``fabric_unhealthy`` (unhealthy); limited capacity, degraded bandwidth or a recovery in
  progress -> ``fabric_unhealthy`` as a warning (degraded) (S04).
- GPUs of one node disagreeing on ClusterUUID or CliqueId -> unhealthy. A zero ClusterUUID is
  normal on single-node NVSwitch platforms (S05) and an error on ``mnnvl`` trays.
- Some GPUs report a fabric state and others none (``Not Supported`` among ``Completed``) ->
  ``partial_registration`` (unhealthy): those GPUs are off the NVLink fabric.
- Left out is not pending (S06): once some GPUs of the node are ``completed``, a GPU still
  ``not_started`` was left out of fabric manager's pass (fabric manager registers a baseboard's
  GPUs in one pass) -> ``partial_registration`` (unhealthy), whatever the grace period. A GPU
  ``in_progress`` next to completed ones may still be registering: pending within the grace
  period (or when it cannot be known), unhealthy after it on a live node.
- Never certify what was not read (S07): a value the verdict needs that the capture or NVML
  does not give is ``fabric_value_missing`` naming it, and the verdict is at best
  ``degraded``: the Status of a completed GPU (N/A: success cannot be told from failure), and
  on ``mnnvl`` its ClusterUUID and CliqueId (the NVLink domain IMEX and NCCL form).
- Every GPU ``Not Supported`` on an ``nvlink5`` or ``mnnvl`` platform (which always reports a
  fabric state) -> ``fabric_info_not_supported`` (unhealthy): the driver gives no fabric info.
- GPUs fine but fabric manager not running on an nvswitch/nvlink5 node -> ``fm_inactive``
  (degraded: fabric manager handles NVSwitch errors and GPU resets at run time). On mnnvl
  trays the IMEX daemon counts only where the host owns IMEX (its unit, or ``nvfabric run``,
  also for the DRA driver's host-managed mode: :mod:`nvfabric.rules.imex.owner`): not running
  there is ``imex_not_ready`` (degraded); where the DRA driver or Slurm start it per job its
  absence is normal. Two owners of IMEX (``imex_owner_conflict``) or a missing channel the
  owner needs (``imex_channel_missing``: channel0, unless Slurm's switch plugin or the DRA
  driver make channels per job) is degraded: the same answer ``run`` logs.
- A reader's finding (NVML missing) on a node whose plan needs no fabric is information.
- A GPU on PCI that NVML does not list -> ``gpu_missing_from_driver`` (unhealthy).
- A GPU whose driver asks for a recovery action (NVML 570+: reset, drain and reset, reboot,
  bus reset; drain P2P, recover the IMEX domain) -> ``gpu_recovery_action`` (unhealthy, or
  degraded for the last two), the action in the hint of that GPU's other findings too.
- A capture judged on what it has: a CSV without a column is refused only when the verdict of
  its rows reads that column (:func:`columns_needed`: fabric.status of Completed GPUs, and on
  ``mnnvl`` or an unknown kind their CliqueId and ClusterUUID); otherwise it is judged and the
  columns it lacks are ``capture_column_missing`` (information). Every GPU of a GB300 tray In
  Progress needs neither (S08's refusal stays: Completed without fabric.status).

Severity order of the result: unhealthy > degraded > pending > healthy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Literal

from nvfabric.model.findings import Finding
from nvfabric.model.health import GpuFabric
from nvfabric.model.services import ServiceState as ServiceState  # re-exported (its old home)
from nvfabric.model.vocab import FabricKind, Service, VerdictWord
from nvfabric.model.words import plural, verb

Level = Literal["unhealthy", "degraded", "pending"]
#: The fabric kind judged: the plan's, the option's or the capture's; ``unknown`` when none.
Judged = FabricKind | Literal["unknown"]
RANK: dict[str, int] = {"healthy": 0, "pending": 1, "degraded": 2, "unhealthy": 3}

DEFAULT_GRACE_S = 300.0

#: Services whose absence keeps GPUs from registering, per fabric kind (plan.py
#: SERVICES_BY_FABRIC; on mnnvl trays the NVLink switch trays' fabric manager registers GPUs).
REGISTERING_SERVICES: dict[str, tuple[Service, ...]] = {
    "none": (),
    "nvswitch": ("fabricmanager",),
    "nvlink5": ("nvlsm", "fabricmanager"),
    "mnnvl": (),
}

#: What usually keeps registration from finishing, per fabric kind (hint of registration_stuck).
STUCK_CAUSE: dict[str, str] = {
    "nvswitch": (
        "usually fabric manager is not running or failed to configure the NVSwitches: "
        "`systemctl status nvidia-fabricmanager`, then `nvfabric doctor --log "
        "/var/log/fabricmanager.log`"
    ),
    "nvlink5": (
        "usually NVLSM is not running or fabric manager was started without the LPF port GUID "
        "(-g): both must use the same management port; `nvfabric plan` shows it, "
        "`nvfabric doctor` on the fabric manager log shows NV_WARN_NOTHING_TO_DO or "
        "'Detected Pre-NVL5 system' when NVLSM is missing"
    ),
    "mnnvl": (
        "a GB200/GB300 tray is registered by the NVLink switch trays' fabric manager: check the "
        "rack's NVLink switch trays / NMX controller and that this tray is in an active partition"
    ),
    "unknown": (
        "usually fabric manager (and NVLSM on B200/B300 baseboards) is not running; pass --root "
        "or --fabric so nvfabric can say which"
    ),
}

CUDA_802 = (
    "CUDA returns error 802 (cudaErrorSystemNotReady, 'system not yet initialized') until "
    "registration completes"
)

#: Product name patterns -> fabric kind, used only when no plan is available (an offline
#: capture without --root). Source: NVIDIA product names as nvidia-smi prints them
#: (tests/data/corpus/nvidia-smi/*: "NVIDIA GB200", "NVIDIA B200", "NVIDIA H100 80GB HBM3").
NAME_FABRIC: tuple[tuple[re.Pattern[str], FabricKind], ...] = (
    (re.compile(r"\bGB[23]00\b"), "mnnvl"),
    (re.compile(r"\bB[123]00\b"), "nvlink5"),
)


@dataclass(frozen=True)
class Inputs:
    """Everything the verdict looks at.

    ``fabric``: the plan's kind (None unknown); ``services`` None when liveness is unknown
    (a saved capture); ``pci_gpu_count`` GPUs on PCI (None unknown); ``grace_s`` seconds
    registration may take after the services started; ``fabric_mode`` fabric manager's
    FABRIC_MODE (None unknown); ``reader_findings`` the reader's own findings;
    ``unread_columns`` the capture columns the reader did not have (none of them needed:
    :func:`columns_needed`).
    """

    gpus: tuple[GpuFabric, ...]
    fabric: FabricKind | None = None
    services: tuple[ServiceState, ...] | None = None
    pci_gpu_count: int | None = None
    grace_s: float = DEFAULT_GRACE_S
    fabric_mode: int | None = None
    reader_findings: tuple[Finding, ...] = ()
    imex_owner: str | None = None
    unread_columns: tuple[str, ...] = ()
    imex_findings: tuple[Finding, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """The answer: ``verdict`` word, the findings behind it, and one line per reason."""

    verdict: VerdictWord
    findings: tuple[Finding, ...] = ()
    reasons: tuple[str, ...] = field(default=())


def columns_needed(gpus: tuple[GpuFabric, ...], fabric: FabricKind | None) -> dict[str, str]:
    """The capture columns the verdict of these rows reads, each with the rows that need it
    (``{"fabric.status": "Completed GPUs 0, 1"}``): fabric.status once a GPU is Completed (its
    success cannot be told from a failure without it); fabric.cliqueId and fabric.clusterUuid
    of Completed GPUs on ``mnnvl`` or an unknown kind (None: the NVLink domain IMEX and NCCL
    form). GPUs still registering, left out or without a fabric need none of them. Pure."""
    done = [g.index for g in gpus if g.state == "completed"]
    if not done:
        return {}
    rows = f"Completed {verb(len(done), 'GPU', 'GPUs')} {', '.join(map(str, done))}"
    out = {"fabric.status": rows}
    if fabric in (None, "mnnvl"):
        where = "on a GB200/GB300 tray" if fabric == "mnnvl" else "of an unknown fabric kind"
        out["fabric.cliqueId"] = out["fabric.clusterUuid"] = f"{rows} {where}"
    return out


def infer_fabric(gpus: tuple[GpuFabric, ...], reader_findings: tuple[Finding, ...] = (),
                 ) -> FabricKind:
    """The fabric kind a capture shows when no plan is at hand: GB200/GB300 -> mnnvl,
    B100/B200/B300 -> nvlink5, any other GPU reporting a fabric state -> nvswitch, else none.
    A GPU whose fabric state could not be read (a reader finding with reason
    ``fabric_info_error``: nvidia-smi printed an error, not N/A) has a fabric: nvswitch."""
    for pattern, kind in NAME_FABRIC:
        if any(g.name and pattern.search(g.name) for g in gpus):
            return kind
    if any(g.state != "not_supported" for g in gpus) or any(
            f.fields.get("reason") == "fabric_info_error" for f in reader_findings):
        return "nvswitch"
    return "none"


class _Acc:
    """Collects (level, finding) pairs and reasons."""

    def __init__(self) -> None:
        self.levels: list[Level] = []
        self.findings: list[Finding] = []
        self.reasons: list[str] = []

    def add(self, level: Level | None, finding: Finding) -> None:
        if level is not None:
            self.levels.append(level)
        self.findings.append(finding)

    def result(self, default: VerdictWord = "healthy") -> Verdict:
        word: VerdictWord = default
        if self.levels:
            word = max(self.levels, key=lambda lv: RANK[lv])
        return Verdict(word, tuple(self.findings), tuple(self.reasons))


def verdict(inp: Inputs) -> Verdict:
    """Judge the fabric (rules in the module docstring). Pure. The rules on registration,
    on registered GPUs' health and on the services per fabric kind live in
    :mod:`.verdict_registration`, :mod:`.verdict_health` and :mod:`.verdict_services` (they
    import this module's types, so they are imported here, when a verdict is asked)."""
    from nvfabric.rules import verdict_health as health
    from nvfabric.rules import verdict_registration as registration
    from nvfabric.rules import verdict_services as services

    acc = _Acc()
    fabric = inp.fabric
    kind = fabric or "unknown"
    gpus = inp.gpus
    reader_failed = any(f.severity == "error" for f in inp.reader_findings)
    fabric_needed = fabric not in (None, "none")
    _reader_findings(inp, acc, fabric_needed)
    _columns_unread(inp, acc)
    _gpus_missing(inp, acc, reader_failed)

    if not gpus:
        return _no_gpus(acc, fabric, fabric_needed, reader_failed)

    reporting = [g for g in gpus if g.state != "not_supported"]
    if not reporting:
        return services.no_fabric_reported(inp, acc)

    acc.reasons.append(
        f"fabric kind {kind}; {len(reporting)} of {plural(len(gpus), 'GPU')} "
        f"{verb(len(reporting), 'reports', 'report')} a fabric state"
    )
    silent = [g for g in gpus if g.state == "not_supported"]
    if silent:
        _silent(acc, silent, reporting, len(gpus), fabric)
    completed = [g for g in gpus if g.state == "completed"]
    left_out = [g for g in gpus if g.state == "not_started"] if completed else []
    registering = [g for g in gpus if g.state == "in_progress"
                   or (g.state == "not_started" and not completed)]
    failed = [g for g in completed if g.status not in (None, "success")]
    ok = [g for g in completed if g.status == "success"]
    if left_out:
        registration.left_out(acc, left_out, completed, len(inp.gpus))
    registration.values_missing(acc, completed, fabric)
    registration.failed(acc, failed, kind)

    if registering:
        registration.registering(inp, acc, registering, completed, kind)

    for g in ok:
        health.gpu_health(acc, g)

    health.consistency(acc, ok, fabric)
    if not registering:
        services.services_when_fine(inp, acc, fabric)
    if fabric == "mnnvl":
        for f in inp.imex_findings:
            acc.add("degraded" if f.severity == "error" else None, f)
    health.recovery(acc, gpus)
    return acc.result()


def _reader_findings(inp: Inputs, acc: _Acc, fabric_needed: bool) -> None:
    """The reader's own findings (NVML missing, a value it could not read): as they are where
    the node needs its fabric, information where its plan has none."""
    fabric = inp.fabric
    for f in inp.reader_findings:
        if fabric == "none" and f.severity != "info":
            acc.add(None, replace(f, severity="info", hint=(
                f"{f.hint}; nothing needs it here: this node's plan has no NVLink fabric"
                if f.hint else "nothing needs it here: this node's plan has no NVLink fabric")))
        elif f.severity == "error":
            acc.add("unhealthy" if fabric_needed else None, f)
        elif f.severity == "warning":
            acc.add("degraded" if fabric_needed else None, f)
        else:
            acc.add(None, f)


def _columns_unread(inp: Inputs, acc: _Acc) -> None:
    """``capture_column_missing`` (information): the capture columns that were not read and
    that the verdict of its rows does not need (:func:`columns_needed`; a needed one refuses
    the capture before any verdict)."""
    unread = inp.unread_columns
    if not unread:
        return
    domain = [c for c in unread if c != "fabric.status"]
    unchecked = (" and whether this node's GPUs agree on their NVLink domain was not checked"
                 if domain and any(g.state == "completed" for g in inp.gpus) else "")
    acc.add(None, Finding(
        "capture_column_missing", "info",
        f"the capture has no {', '.join(unread)} column: the verdict of these rows does not "
        f"need {verb(len(unread), 'it', 'them')}{unchecked}",
        f"capture every fabric column for a full picture: `{_CAPTURE}`",
        {"columns": list(unread)},
    ))


#: The capture line with every column (nvfabric.facts.smi.CSV_QUERY; rules read no facts).
_CAPTURE = ("nvidia-smi --query-gpu=index,uuid,pci.bus_id,fabric.state,fabric.status,"
            "fabric.cliqueId,fabric.clusterUuid --format=csv")


def _no_gpus(acc: _Acc, fabric: str | None, fabric_needed: bool, reader_failed: bool) -> Verdict:
    """No GPU read: not applicable, unless the node needs its fabric and nothing else said
    why (then ``gpu_missing_from_driver``)."""
    acc.reasons.append("no GPU could be read" if reader_failed else "no GPU listed")
    if fabric_needed and not acc.levels:
        acc.add("unhealthy", Finding(
            "gpu_missing_from_driver", "error",
            f"no GPU is listed on a {fabric} node",
            "check that the capture or NVML covers all GPUs (`nvidia-smi -L`) and `dmesg` "
            "for GPUs that failed to initialise",
        ))
    return acc.result("not_applicable")


def _gpus_missing(inp: Inputs, acc: _Acc, reader_failed: bool) -> None:
    """``gpu_missing_from_driver``: fewer GPUs read than are on PCI (when the reader worked)."""
    gpus = inp.gpus
    if inp.pci_gpu_count is not None and not reader_failed and len(gpus) < inp.pci_gpu_count:
        missing = inp.pci_gpu_count - len(gpus)
        acc.add("unhealthy", Finding(
            "gpu_missing_from_driver", "error",
            f"{missing} of {plural(inp.pci_gpu_count, 'GPU')} on PCI "
            f"{verb(missing, 'is', 'are')} not listed by the driver",
            "check `dmesg` for Xid 79 / 'fallen off the bus' and RmInitAdapter errors; the GPU "
            "needs a reset or a power cycle, and the fabric waits for every GPU",
            {"pci_gpus": inp.pci_gpu_count, "driver_gpus": len(gpus)},
        ))


def _silent(acc: _Acc, silent: list[GpuFabric], reporting: list[GpuFabric], total: int,
            fabric: FabricKind | None) -> None:
    """``partial_registration``: some GPUs report no fabric state while others report one."""
    acc.add("degraded" if fabric == "none" else "unhealthy", Finding(
        "partial_registration", "warning" if fabric == "none" else "error",
        f"{len(silent)} of {plural(total, 'GPU')} "
        f"{verb(len(silent), 'reports', 'report')} no fabric state "
        f"({verb(len(silent), 'GPU', 'GPUs')} "
        + ", ".join(str(g.index) for g in silent)
        + f") while {len(reporting)} {verb(len(reporting), 'reports', 'report')} one: "
        + verb(len(silent), "that GPU is", "those GPUs are") + " not on the NVLink fabric",
        "GPUs of one baseboard all register with the fabric; one without fabric info is "
        "usually a GPU the driver could not bring onto NVLink: compare the Fabric sections "
        "of `nvidia-smi -q`, check `dmesg` for Xid errors, then reset the GPU",
        {"gpus": [g.index for g in silent], "states": sorted({g.state for g in reporting})},
    ))


def _service(services: tuple[ServiceState, ...] | None, name: str) -> ServiceState | None:
    for s in services or ():
        if s.name == name:
            return s
    return None
