"""The verdict's rules on registered GPUs (:mod:`nvfabric.rules.verdict`, S04, S05): the
health fields of each completed GPU and one NVLink domain (ClusterUUID, CliqueId) for all of
them; and the recovery action any GPU's driver asks for (:func:`recovery`). Pure.
"""

from __future__ import annotations

from nvfabric.model.findings import Finding
from nvfabric.model.health import ZERO_UUID, GpuFabric
from nvfabric.model.vocab import FabricKind
from nvfabric.model.words import plural, verb
from nvfabric.rules.live import RECOVERY, recovery_hint
from nvfabric.rules.verdict import (
    Level,
    _Acc,
)


def gpu_health(acc: _Acc, g: GpuFabric) -> None:
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
        "(`nvfabric doctor`), then drain and reset the GPU if it persists",
        {"gpu": g.index, "uuid": g.uuid, "pci": g.pci, "health_summary": g.health_summary,
         "problems": problems},
    ))


def recovery(acc: _Acc, gpus: tuple[GpuFabric, ...]) -> None:
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


def consistency(acc: _Acc, ok: list[GpuFabric], fabric: FabricKind | None) -> None:
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
