"""The :class:`nvfabric.rules.cluster.FabricView` of what publishing is given: the object of
``nvfabric status --json`` (the public contract: ``verdict``, ``fabric``, ``findings``,
``gpus``, ``imex``, ``hostname``; ``/status`` serves the same) and, under ``run``, the unit's
snapshot (:class:`nvfabric.observe.unitstate.UnitSnapshot`: its fault, whether it stopped).

A value that is not what the contract says (a damaged or foreign object) is left out rather
than published: an unknown verdict is no reading, a finding with an unknown code or severity
is skipped.
"""

from __future__ import annotations

from typing import Any

from nvfabric.model.findings import CODES, Finding
from nvfabric.model.vocab import FABRIC_KINDS, SEVERITIES, VERDICTS
from nvfabric.observe.unitstate import UnitSnapshot
from nvfabric.rules.cluster import FabricView

#: The unit's phases of a first bring-up (before it was ready once): the verdict of a reading
#: then (services not yet started, GPUs not yet registered) is no fault: pending.
STARTING = ("idle", "starting")


def _finding(obj: object) -> Finding | None:
    if not isinstance(obj, dict):
        return None
    code, severity = obj.get("code"), obj.get("severity")
    if code not in CODES or severity not in SEVERITIES:
        return None
    fields = {k: v for k, v in obj.items() if k not in ("code", "severity", "message", "hint")}
    return Finding(code, severity, str(obj.get("message") or ""), str(obj.get("hint") or ""),
                   fields)


def cliques(gpus: object) -> tuple[str, ...]:
    """``<ClusterUUID>.<CliqueId>`` of each GPU registered with success (state completed,
    status success), as GPU feature discovery forms it from NVML's fabric info."""
    out: list[str] = []
    for g in gpus if isinstance(gpus, list) else []:
        if not isinstance(g, dict) or g.get("state") != "completed" \
                or str(g.get("status") or "").lower() != "success":
            continue
        uuid, clique_id = g.get("cluster_uuid"), g.get("clique_id")
        if isinstance(uuid, str) and isinstance(clique_id, int) \
                and not isinstance(clique_id, bool) and clique_id >= 0:
            out.append(f"{uuid.lower()}.{clique_id}")
    return tuple(out)


def view_of(status: dict[str, Any] | None, unit: UnitSnapshot | None = None,
            read_error: str | None = None) -> FabricView:
    """The view of one ``status --json`` object (None: no reading yet) and the run's unit
    (during a first bring-up, :data:`STARTING`, the view is ``starting``: pending, without the
    reading's findings, which judge services not yet started)."""
    fault = unit.fault if unit is not None else None
    stopped = unit is not None and unit.phase == "done" and fault is None
    if status is None:
        return FabricView(None, fault=fault, stopped=stopped, read_error=read_error)
    verdict = status.get("verdict")
    # the run is bringing its unit up (services not yet running, GPUs not yet registered)
    starting = unit is not None and fault is None and unit.restarts == 0 \
        and unit.phase in STARTING
    fabric = status.get("fabric")
    imex = status.get("imex")
    owner = imex.get("owner") if isinstance(imex, dict) else None
    findings = () if starting else tuple(
        f for f in map(_finding, status.get("findings") or []) if f is not None)
    return FabricView(
        "pending" if starting else verdict if verdict in VERDICTS else None, findings,
        fabric if fabric in FABRIC_KINDS else None, owner if isinstance(owner, str) else None,
        cliques(status.get("gpus")), fault, stopped, read_error, starting)

