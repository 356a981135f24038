"""The verdict's rules on GPU fabric registration (:mod:`nvfabric.rules.verdict`, rules S02,
S03, S06, S07 in its docstring): GPUs left out of fabric manager's pass, values a completed
GPU does not report, a registration completed with an error, and GPUs still registering
(pending within the grace period, ``registration_stuck`` after it or with the registering
services down). Pure.
"""

from __future__ import annotations

from typing import Any

from nvfabric.model.findings import Finding
from nvfabric.model.health import GpuFabric
from nvfabric.model.vocab import FabricKind
from nvfabric.model.words import plural, verb
from nvfabric.rules.verdict import (
    CUDA_802,
    REGISTERING_SERVICES,
    STUCK_CAUSE,
    Inputs,
    Judged,
    _Acc,
    _service,
)


def left_out(acc: _Acc, left_out: list[GpuFabric], completed: list[GpuFabric],
             total: int) -> None:
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
        "(`nvfabric doctor --log /var/log/fabricmanager.log`; excluded GPUs, NVLink training "
        "or Xid errors), `dmesg` for Xid errors, then reset the GPUs and restart fabric "
        "manager (or reboot)",
        {"gpus": [g.index for g in left_out], "pcis": [g.pci for g in left_out],
         "completed_gpus": len(completed)},
    ))


def values_missing(acc: _Acc, completed: list[GpuFabric], fabric: FabricKind | None) -> None:
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


def registering(
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
    cause = STUCK_CAUSE.get(kind, STUCK_CAUSE["unknown"])
    hint = f"{CUDA_802}; {cause}"
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


def failed(acc: _Acc, failed: list[GpuFabric], kind: Judged) -> None:
    """S03: ``registration_error`` for each GPU whose registration completed with a status
    other than success."""
    for g in failed:
        acc.add("unhealthy", Finding(
            "registration_error", "error",
            f"{g.label}: fabric registration completed with status {g.status}: the GPU is not "
            "attached to the NVLink fabric",
            registration_error_hint(g.status, kind),
            {"gpu": g.index, "uuid": g.uuid, "pci": g.pci, "status": g.status},
        ))


def registration_error_hint(status: str | None, kind: Judged) -> str:
    if status == "NVML_ERROR_INSUFFICIENT_RESOURCES":
        return (
            "the fabric could not give this GPU its resources (on GB200/GB300: the tray is not "
            "in an active NVLink partition or the switch trays lack routes): check the NVLink "
            "switch trays / NMX partition, then reset the GPU"
        )
    if kind == "nvlink5":
        return ("check that NVLSM and fabric manager run on the same management port and "
                "`nvfabric doctor` their logs; a GPU reset is needed after the fix")
    return ("check fabric manager's log (`nvfabric doctor --log ...`); a GPU reset is needed "
            "after the fix")
