"""The verdict: can CUDA use this node's NVLink fabric? Pure rules over the plan's fabric kind,
the services' liveness and every GPU's fabric registration. No I/O, no clock: elapsed times
come in as numbers.

Rules (from the field cases tests/data/cases/S*.yaml and the NVIDIA Fabric Manager User
Guide, "GPU fabric registration" / "NVLink 5"):

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
  driver make channels per job) is an error, so unhealthy: the same answer ``run`` logs.
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

Severity order of the result: unhealthy > degraded > pending > healthy. Every finding of
severity error makes it unhealthy, whichever rule gave it (:meth:`_Acc.add`): no error is
listed beside a better verdict (``ready`` and ``status`` exit on it); a finding that must not
weigh is given as a warning or information.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from nvfabric.model.commandline import HintContext
from nvfabric.model.findings import Finding
from nvfabric.model.health import ZERO_UUID, GpuFabric
from nvfabric.model.services import ServiceState
from nvfabric.model.vocab import FabricKind, Service, VerdictWord
from nvfabric.model.words import plural, verb
from nvfabric.rules.live import RECOVERY, recovery_hint

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

def stuck_cause(kind: Judged, ctx: HintContext) -> str:
    """What usually keeps registration from finishing on ``kind`` (the hint of
    registration_stuck), in commands that work on the node ``ctx`` names: its root, and the
    unit or run that runs fabric manager there."""
    if kind == "nvswitch":
        return ("usually fabric manager is not running or failed to configure the NVSwitches: "
                f"{ctx.fm_status()}, then {ctx.fm_doctor()}")
    if kind == "nvlink5":
        return ("usually NVLSM is not running or fabric manager was started without the LPF "
                f"port GUID (-g): both must use the same management port; "
                f"`{ctx.nvfabric('plan')}` shows it, {ctx.fm_doctor()} shows "
                "NV_WARN_NOTHING_TO_DO or 'Detected Pre-NVL5 system' when NVLSM is missing"
                + (f"; {ctx.fm_status()}" if ctx.fm_runner is not None else ""))
    if kind == "mnnvl":
        return ("a GB200/GB300 tray is registered by the NVLink switch trays' fabric manager: "
                "check the rack's NVLink switch trays / NMX controller and that this tray is "
                "in an active partition")
    if kind == "none":
        return ("this node's plan starts nothing (no NVSwitch and no LPF on PCI), so nothing "
                "here registers these GPUs: GPUs of an NVSwitch baseboard without its "
                f"NVSwitches (a guest) stay so; `{ctx.nvfabric('plan')}` says why")
    return ("usually fabric manager (and NVLSM on B200/B300 baseboards) is not running; pass "
            "--root or --fabric so nvfabric can say which")


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
    :func:`columns_needed`); ``plan_findings`` the plan's warnings, which block nothing
    (``sxm_gpus_without_nvswitch``: they say why a fabric kind is what it is); ``hints`` the
    node the hints' commands act on (its root, who runs fabric manager and IMEX there;
    default: the node itself, nothing known).
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
    plan_findings: tuple[Finding, ...] = ()
    hints: HintContext = field(default_factory=HintContext)


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
                 ) -> FabricKind | None:
    """The fabric kind a capture shows when no plan is at hand: GB200/GB300 -> mnnvl,
    B100/B200/B300 -> nvlink5, any other GPU reporting a fabric state -> nvswitch, else none.
    A GPU whose fabric state could not be read (a reader finding with reason
    ``fabric_info_error``: nvidia-smi printed an error, not N/A) has a fabric: nvswitch.
    None (cannot tell) when no GPU has a product name (a ``--query-gpu`` CSV without the name
    column, ``-q -d FABRIC``, an excerpt of Fabric blocks): a fabric state is reported on
    HGX H100 and B200 alike, so nvswitch would be a guess (:func:`kind_untold`)."""
    if not any(g.name for g in gpus):
        return None
    for pattern, kind in NAME_FABRIC:
        if any(g.name and pattern.search(g.name) for g in gpus):
            return kind
    if any(g.state != "not_supported" for g in gpus) or any(
            f.fields.get("reason") == "fabric_info_error" for f in reader_findings):
        return "nvswitch"
    return "none"


def kind_untold(capture_form: str) -> Finding:
    """``capture_column_missing`` (information) of a capture that names no GPU product
    (``capture_form``: ``nvidia-smi-csv``, ``-text``, ``-xml``): its fabric kind cannot be
    told, and it is judged as of an unknown kind (every platform's meaning said)."""
    where = ("no name column" if capture_form == "nvidia-smi-csv" else
             "no Product Name of any GPU")
    return Finding(
        "capture_column_missing", "info",
        f"the capture has {where}: which fabric kind this node has (nvswitch on HGX "
        "H100/H200, nvlink5 on B200/B300, mnnvl on GB200/GB300) cannot be told from it, so "
        "it is judged for an unknown fabric kind",
        "pass --fabric (or --root on the node), or capture the product name too: "
        f"`{_CAPTURE.replace('index,uuid,', 'index,uuid,name,')}`",
        {"columns": ["name"]},
    )


class _Acc:
    """Collects (level, finding) pairs and reasons."""

    def __init__(self) -> None:
        self.levels: list[Level] = []
        self.findings: list[Finding] = []
        self.reasons: list[str] = []

    def add(self, level: Level | None, finding: Finding) -> None:
        """Add ``finding`` at ``level`` (None: it does not weigh). An error finding weighs
        ``unhealthy`` whatever the level given: no error is left out of the verdict (a
        finding that must not weigh is given as a warning or information)."""
        if finding.severity == "error":
            level = "unhealthy"
        if level is not None:
            self.levels.append(level)
        self.findings.append(finding)

    def result(self, default: VerdictWord = "healthy") -> Verdict:
        word: VerdictWord = default
        if self.levels:
            word = max(self.levels, key=lambda lv: RANK[lv])
        return Verdict(word, tuple(self.findings), tuple(self.reasons))


def verdict(inp: Inputs) -> Verdict:
    """Judge the fabric (rules in the module docstring). Pure."""

    acc = _Acc()
    fabric = inp.fabric
    kind = fabric or "unknown"
    gpus = inp.gpus
    reader_failed = any(f.severity == "error" for f in inp.reader_findings)
    fabric_needed = fabric not in (None, "none")
    for f in inp.plan_findings:  # a blocker (an error): nothing can bring the fabric up
        acc.add("unhealthy" if f.severity == "error" else None, f)
    _reader_findings(inp, acc, fabric_needed)
    _columns_unread(inp, acc)
    _gpus_missing(inp, acc, reader_failed)

    if not gpus:
        return _no_gpus(acc, fabric, fabric_needed, reader_failed)

    reporting = [g for g in gpus if g.state != "not_supported"]
    if not reporting:
        return _no_fabric_reported(inp, acc)

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
        _left_out(acc, left_out, completed, len(inp.gpus), inp.hints)
    _values_missing(acc, completed, fabric)
    _failed(acc, failed, kind, inp.hints)

    if registering:
        _registering(inp, acc, registering, completed, kind)

    for g in ok:
        _gpu_health(acc, g, inp.hints)

    _consistency(acc, ok, fabric)
    if not registering:
        _services_when_fine(inp, acc, fabric)
    if fabric == "mnnvl":
        for f in inp.imex_findings:  # two owners, a channel the owner needs
            acc.add("unhealthy" if f.severity == "error" else None, f)
    _recovery(acc, gpus)
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
        elif f.severity == "error":  # of an unknown fabric kind too: nothing certified
            acc.add("unhealthy", f)
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


# -- GPU fabric registration (S02, S03, S06, S07): GPUs left out of fabric manager's pass,
# values a completed GPU does not report, a registration completed with an error, GPUs still
# registering


def _left_out(acc: _Acc, left_out: list[GpuFabric], completed: list[GpuFabric],
             total: int, ctx: HintContext) -> None:
    """S06: GPUs still Not Started next to Completed ones were left out of the pass;
    ``total`` is every GPU read (In Progress and Not Supported ones count too)."""
    labels = ", ".join(str(g.index) for g in left_out)
    acc.add("unhealthy", Finding(
        "partial_registration", "error",
        f"{len(left_out)} of {total} GPUs were left out of fabric "
        f"registration (GPUs {labels} Not Started while {len(completed)} completed): waiting "
        "does not fix it",
        "fabric manager registers a baseboard's GPUs in one pass; a GPU it left out was "
        "excluded or has NVLink trouble: check fabric manager's log for the GPU "
        f"({ctx.fm_doctor()}; excluded GPUs, NVLink training or Xid errors), `dmesg` for "
        f"Xid errors, then reset the GPUs and restart fabric manager ({ctx.fm_start()}; or "
        "reboot)",
        {"gpus": [g.index for g in left_out], "pcis": [g.pci for g in left_out],
         "completed_gpus": len(completed)},
    ))


def _values_missing(acc: _Acc, completed: list[GpuFabric], fabric: FabricKind | None) -> None:
    """S07: a value the verdict needs that was not read makes it at best degraded."""
    needs = [("status", "Status")]
    if fabric == "mnnvl":
        needs += [("cluster_uuid", "ClusterUUID"), ("clique_id", "CliqueId")]
    for attr, printed in needs:
        unread = [g for g in completed if getattr(g, attr) is None]
        if not unread:
            continue
        labels = ", ".join(str(g.index) for g in unread)
        acc.add("degraded", Finding(
            "fabric_value_missing", "warning",
            f"{len(unread)} completed GPUs (GPUs {labels}) report no fabric {printed} (N/A "
            "or missing): the fabric cannot be certified healthy without it",
            "read it where it is printed: `nvidia-smi -q` (Fabric section) or `nvidia-smi "
            "--query-gpu=index,uuid,fabric.state,fabric.status,fabric.cliqueId,"
            "fabric.clusterUuid --format=csv`; on a GB200/GB300 tray a completed registration "
            "without ClusterUUID/CliqueId means the NVLink domain is not formed: check the "
            "NVLink switch trays / NMX partition and the driver version",
            {"value": printed, "gpus": [g.index for g in unread]},
        ))


def _registering(
    inp: Inputs, acc: _Acc, registering: list[GpuFabric], completed: list[GpuFabric], kind: Judged
) -> None:
    labels = ", ".join(str(g.index) for g in registering)
    count = len(registering)
    fields: dict[str, Any] = {"gpus": [g.index for g in registering]}
    if completed:
        acc.add(None, Finding(
            "partial_registration", "warning",
            f"{plural(len(completed), 'GPU')} completed registration, {count} did not "
            f"({verb(count, 'GPU', 'GPUs')} {labels})",
            "a GPU that lags the others usually has NVLink or firmware trouble: check its "
            "`nvidia-smi -q` Fabric section and `dmesg` for Xid errors",
            fields,
        ))
    if inp.fabric_mode == 1 and not any(
        (f := g.field("partition_assigned")) is not None and f.value == "true"
        for g in inp.gpus
    ):
        acc.add("pending", Finding(
            "fabric_partition_inactive", "info",
            f"FABRIC_MODE=1 (shared NVSwitch): {plural(count, 'GPU')} "
            f"{verb(count, 'waits', 'wait')} for a fabric partition to be activated",
            "activate a partition through fabric manager's API (the hypervisor or "
            "fmpm/`nv-partitioner` does this); registration then completes",
            fields,
        ))
        return
    _stuck(inp, acc, count, labels, fields, kind)


def _stuck(inp: Inputs, acc: _Acc, count: int, labels: str, fields: dict[str, Any],
           kind: Judged) -> None:
    """``registration_stuck`` for ``count`` GPUs still registering: pending when liveness or
    the services' age is unknown or within the grace period, unhealthy with a registering
    service down or past the grace period."""
    hint = f"{CUDA_802}; {stuck_cause(kind, inp.hints)}"
    if inp.services is None:
        acc.add("pending", Finding(
            "registration_stuck", "warning",
            f"{plural(count, 'GPU')} {verb(count, 'has', 'have')} not finished fabric "
            f"registration ({verb(count, 'GPU', 'GPUs')} {labels}); a saved capture cannot "
            "tell for how long",
            hint, fields,
        ))
        return
    needed = REGISTERING_SERVICES.get(inp.fabric or "", ())
    down = [n for n in needed if not ((s := _service(inp.services, n)) and s.running)]
    if down:
        acc.add("unhealthy", Finding(
            "registration_stuck", "error",
            f"{plural(count, 'GPU')} cannot finish fabric registration: {', '.join(down)} "
            "not running",
            hint, {**fields, "services_down": down},
        ))
        return
    ages = [s.age_s for n in needed if (s := _service(inp.services, n)) is not None]
    if not needed or not ages or any(a is None for a in ages):
        acc.add("pending", Finding(
            "registration_stuck", "warning",
            f"{plural(count, 'GPU')} {verb(count, 'is', 'are')} registering "
            f"({verb(count, 'GPU', 'GPUs')} {labels}); how long the services have run is "
            "unknown",
            hint, fields,
        ))
        return
    age = min(a for a in ages if a is not None)
    if age < inp.grace_s:
        acc.add("pending", Finding(
            "registration_stuck", "warning",
            f"{plural(count, 'GPU')} {verb(count, 'is', 'are')} registering, {age:.0f} s "
            f"after the services started (grace period {inp.grace_s:.0f} s)",
            hint, {**fields, "elapsed_s": round(age, 1), "grace_s": inp.grace_s},
        ))
    else:
        acc.add("unhealthy", Finding(
            "registration_stuck", "error",
            f"{plural(count, 'GPU')} {verb(count, 'is', 'are')} still registering "
            f"{age:.0f} s after the services started (grace period {inp.grace_s:.0f} s)",
            hint, {**fields, "elapsed_s": round(age, 1), "grace_s": inp.grace_s},
        ))


def _failed(acc: _Acc, failed: list[GpuFabric], kind: Judged, ctx: HintContext) -> None:
    """S03: ``registration_error`` for each GPU whose registration completed with a status
    other than success."""
    for g in failed:
        acc.add("unhealthy", Finding(
            "registration_error", "error",
            f"{g.label}: fabric registration completed with status {g.status}: the GPU is not "
            "attached to the NVLink fabric",
            registration_error_hint(g.status, kind, ctx),
            {"gpu": g.index, "uuid": g.uuid, "pci": g.pci, "status": g.status},
        ))


def registration_error_hint(status: str | None, kind: Judged, ctx: HintContext) -> str:
    if status == "NVML_ERROR_INSUFFICIENT_RESOURCES":
        return (
            "the fabric could not give this GPU its resources (on GB200/GB300: the tray is not "
            "in an active NVLink partition or the switch trays lack routes): check the NVLink "
            "switch trays / NMX partition, then reset the GPU"
        )
    if kind == "nvlink5":
        return ("check that NVLSM and fabric manager run on the same management port "
                f"(`{ctx.nvfabric('plan')}`) and their logs ({ctx.fm_doctor()}); a GPU reset "
                "is needed after the fix")
    return (f"check fabric manager's log ({ctx.fm_doctor()}); a GPU reset is needed after "
            "the fix")


# -- registered GPUs (S04, S05): the health fields of each completed GPU and one NVLink
# domain (ClusterUUID, CliqueId) for all of them


def _gpu_health(acc: _Acc, g: GpuFabric, ctx: HintContext) -> None:
    problems: list[str] = []
    level: Level | None = None
    if g.health_summary == "unhealthy":
        problems.append("health summary Unhealthy")
        level = "unhealthy"
    elif g.health_summary == "limited_capacity":
        problems.append("health summary Limited Capacity")
        level = "degraded"
    for f in g.health:
        if f.impact is not None:
            problems.append(f"{f.name}={f.value}")
            if f.impact == "unhealthy":
                level = "unhealthy"
            elif level is None:
                level = "degraded"
    if level is None:
        return
    acc.add(level, Finding(
        "fabric_unhealthy", "error" if level == "unhealthy" else "warning",
        f"{g.label}: registered but " + ", ".join(problems),
        "the GPU is attached yet its NVLink routes are not all usable: check the health fields "
        "in `nvidia-smi -q` (Fabric / Health), NVSwitch errors in fabric manager's log "
        f"({ctx.fm_doctor()}), then drain and reset the GPU if it persists",
        {"gpu": g.index, "uuid": g.uuid, "pci": g.pci, "health_summary": g.health_summary,
         "problems": problems},
    ))


def _consistency(acc: _Acc, ok: list[GpuFabric], fabric: FabricKind | None) -> None:
    clusters = sorted({g.cluster_uuid for g in ok if g.cluster_uuid is not None})
    cliques = sorted({g.clique_id for g in ok if g.clique_id is not None})
    if len(clusters) > 1 or len(cliques) > 1:
        acc.add("unhealthy", Finding(
            "fabric_unhealthy", "error",
            "GPUs of this node disagree on their NVLink domain: ClusterUUIDs "
            f"{', '.join(clusters) or '-'}; CliqueIds {', '.join(map(str, cliques)) or '-'}",
            "all GPUs of a node belong to one clique; a GPU in another partition or domain "
            "needs the partition fixed (NVLink switch trays / fabric manager) and a GPU reset",
            {"cluster_uuids": clusters, "clique_ids": cliques},
        ))
        return
    zero = [g for g in ok if g.cluster_uuid == ZERO_UUID]
    if not zero:
        return
    if fabric == "mnnvl":
        acc.add("unhealthy", Finding(
            "fabric_unhealthy", "error",
            f"{plural(len(zero), 'GPU')} {verb(len(zero), 'has', 'have')} a zero ClusterUUID "
            "on a multi-node NVLink tray: " + verb(len(zero), "it is", "they are")
            + " not part of any NVLink domain",
            "the tray must be in an active NVLink partition (NVLink switch trays / NMX "
            "controller); until then multi-node NVLink (IMEX, MNNVL NCCL) cannot work",
            {"gpus": [g.index for g in zero]},
        ))
    else:
        acc.reasons.append(
            "zero ClusterUUID: NVLink within this node, no multi-node domain (normal here)"
        )


# -- the fabric services, per fabric kind: GPUs that report no fabric state, and once the
# GPUs are fine, fabric manager and NVLSM (nvswitch, nvlink5) or the host's IMEX daemon (mnnvl,
# only where the host owns IMEX)


def _recovery(acc: _Acc, gpus: tuple[GpuFabric, ...]) -> None:
    """Every GPU whose driver reports a recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION):
    one ``gpu_recovery_action`` finding, and the action added to the hint of that GPU's other
    findings (they are what the action recovers from)."""
    for g in gpus:
        entry = RECOVERY.get(g.recovery_action or "")
        words = recovery_hint(g.recovery_action)
        if entry is None or words is None:
            continue
        for i, f in enumerate(acc.findings):
            if f.fields.get("gpu") == g.index and words not in f.hint:
                acc.findings[i] = Finding(f.code, f.severity, f.message,
                                          f"{words}; {f.hint}" if f.hint else words, f.fields)
        acc.add(entry[0], Finding(
            "gpu_recovery_action", "error" if entry[0] == "unhealthy" else "warning",
            f"{g.label}: the driver asks for a recovery action before the GPU is used again: "
            f"{g.recovery_action}", words,
            {"gpu": g.index, "uuid": g.uuid, "pci": g.pci,
             "recovery_action": g.recovery_action}))


def _no_fabric_reported(inp: Inputs, acc: _Acc) -> Verdict:
    fabric = inp.fabric
    if fabric in (None, "none"):
        acc.reasons.append(
            "no GPU reports an NVLink fabric (state N/A / not supported) and this platform has "
            "none to manage: nothing to judge"
        )
        return acc.result("not_applicable")
    if fabric == "nvswitch":
        fm = _service(inp.services, "fabricmanager")
        acc.reasons.append(
            "these GPUs do not report fabric registration (before Hopper, or an old driver): "
            "judged by fabric manager's liveness"
        )
        if fm is None:
            acc.add("degraded", Finding(
                "fabric_info_not_supported", "warning",
                "the GPUs report no fabric state and fabric manager's liveness is unknown",
                f"run `{inp.hints.nvfabric('status')}` on the node itself (it checks the fabric "
                "manager process)",
            ))
        elif not fm.running:
            acc.add("unhealthy", Finding(
                "fm_inactive", "error",
                "fabric manager is not running on an NVSwitch node whose GPUs do not report "
                "fabric registration: CUDA cannot use NVLink peer access",
                f"start fabric manager ({inp.hints.fm_start()}) at exactly the driver's "
                "version",
            ))
        return acc.result()
    acc.add("unhealthy", Finding(
        "fabric_info_not_supported", "error",
        f"every GPU reports fabric State 'Not Supported' on a {fabric} platform, which always "
        "reports one: the driver gives no fabric info, so nothing is registered",
        "the driver may be too old for this platform or not fully loaded: check the driver "
        "branch supports these GPUs' NVLink fabric, `nvidia-smi -q` (Fabric section) and "
        "`dmesg`; on a GB200/GB300 tray also that it is in an NVLink partition of the rack",
        {"fabric": fabric, "gpus": [g.index for g in inp.gpus]},
    ))
    return acc.result()


def _services_when_fine(inp: Inputs, acc: _Acc, fabric: FabricKind | None) -> None:
    if inp.services is None:
        return
    if fabric == "mnnvl":
        _imex_when_fine(inp, acc)
        return
    if fabric not in ("nvswitch", "nvlink5"):
        return
    fm = _service(inp.services, "fabricmanager")
    if fm is None or not fm.running:
        acc.add("degraded", Finding(
            "fm_inactive", "warning",
            "the GPUs are registered but fabric manager is not running",
            "fabric manager handles NVSwitch errors, GPU resets and NVLink recovery at run "
            f"time: start it again ({inp.hints.fm_start()}); a restart after GPUs registered "
            "needs a GPU reset on H100 and later",
        ))
    if fabric == "nvlink5":
        sm = _service(inp.services, "nvlsm")
        if sm is None or not sm.running:
            acc.add("degraded", Finding(
                "nvlsm_missing", "warning",
                "the GPUs are registered but NVLSM is not running on the management port",
                "NVLSM keeps the NVLink 5 routes; start it with fabric manager "
                f"({inp.hints.fm_start()})",
            ))


def _imex_when_fine(inp: Inputs, acc: _Acc) -> None:
    """IMEX on an mnnvl tray: judged only where the host owns it (see the module docstring)."""
    imex = _service(inp.services, "imex")
    if imex is None or imex.running:
        return
    owner = inp.imex_owner
    if owner in ("host", "dra-host", "nvfabric"):  # nvfabric: a live run supervises it
        acc.add("degraded", Finding(
            "imex_not_ready", "warning",
            "the GPUs are registered but the host's IMEX daemon is not running: multi-node "
            "NVLink memory sharing (IMEX channels) does not work",
            f"{inp.hints.imex_start()}; {inp.hints.imex_domain()} then shows the domain "
            "state",
            {"imex_owner": owner},
        ))
    elif owner == "none":
        acc.add(None, Finding(
            "imex_not_ready", "info",
            "no IMEX daemon runs and nothing on this node owns IMEX (no enabled "
            "nvidia-imex.service, no DRA driver state, no Slurm prolog)",
            "single-node work is fine; for multi-node NVLink memory sharing start IMEX: "
            + inp.hints.imex_start(),
            {"imex_owner": owner},
        ))
    elif owner == "unknown":
        acc.reasons.append(
            "who owns IMEX is not known (imex_owner_unknown): the daemon not running now is "
            "not judged")
    else:
        acc.reasons.append(
            f"IMEX is owned by {owner or 'an unknown owner'}, which starts the daemon per "
            "job: it not running now is not judged"
        )
