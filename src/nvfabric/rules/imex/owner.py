"""Who runs IMEX on this node: the host, the Kubernetes DRA driver, a Slurm prolog, or nobody.
Pure: decides from :class:`OwnerEvidence` (gathered by :mod:`nvfabric.facts.imexhost`).

Owners (nvfabric issue 6; NVIDIA IMEX guide, "Deployment Models"):

- ``host``: one IMEX daemon per node for the whole node list, started by the host, either the
  packaged ``nvidia-imex.service`` or ``nvfabric run`` itself.
- ``dra``: NVIDIA's DRA driver runs one IMEX daemon per ComputeDomain in a pod; the host unit
  must be disabled and masked (GPU Operator DRA prerequisites).
- ``slurm``: a Slurm prolog writes the job's node list and (re)starts IMEX per job, or Slurm's
  ``switch/nvidia_imex`` plugin manages channels per job.
- ``none``: nothing runs IMEX here.

Two daemons on one node break each other (``Failed to allocate Imex session ...
NV_ERR_IN_USE``): that is ``imex_owner_conflict``, with the exact fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nvfabric.model.findings import Finding
from nvfabric.rules.imex.tables import DRA_HOST_UNIT_FIX, HOST_UNIT

OWNERS = ("host", "dra", "slurm", "none")


@dataclass(frozen=True)
class OwnerEvidence:
    """What the host shows, one line per fact, each naming the path it comes from.

    ``dra``: DRA kubelet plugin state found; ``unit_enabled``: wants/ symlinks of the host
    unit; ``unit_masked``: the unit is masked (a link to /dev/null), which overrides enabled;
    ``slurm``: slurm.conf or prolog lines that manage IMEX.
    """

    dra: tuple[str, ...] = ()
    unit_enabled: tuple[str, ...] = ()
    unit_masked: str | None = None
    slurm: tuple[str, ...] = ()

    @property
    def unit_active(self) -> bool:
        """Enabled and not masked: the unit starts at boot."""
        return bool(self.unit_enabled) and self.unit_masked is None

    def lines(self) -> tuple[str, ...]:
        out = [f"DRA: {d}" for d in self.dra]
        out += [f"{HOST_UNIT} enabled: {w}" for w in self.unit_enabled]
        if self.unit_masked:
            out.append(f"{HOST_UNIT} masked: {self.unit_masked}")
        out += [f"Slurm: {s}" for s in self.slurm]
        return tuple(out)


@dataclass(frozen=True)
class Ownership:
    """The decision. ``owner`` in :data:`OWNERS`; ``source`` ``requested`` or ``detected``;
    ``runner`` who starts the host daemon (``unit`` or ``nvfabric``, None unless host);
    ``conflict`` the ``imex_owner_conflict`` finding when two owners claim the node."""

    owner: str
    source: str
    runner: str | None
    evidence: tuple[str, ...]
    reasons: tuple[str, ...]
    conflict: Finding | None = None

    @property
    def nvfabric_starts_imex(self) -> bool:
        return self.owner == "host" and self.runner == "nvfabric" and self.conflict is None

    def to_json(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "source": self.source,
            "runner": self.runner,
            "evidence": list(self.evidence),
            "reasons": list(self.reasons),
            "conflict": self.conflict.to_json() if self.conflict else None,
        }


def detect(ev: OwnerEvidence) -> str:
    """The owner the evidence points to: DRA state wins, then Slurm, then the host unit."""
    if ev.dra:
        return "dra"
    if ev.slurm:
        return "slurm"
    if ev.unit_active:
        return "host"
    return "none"


def decide(ev: OwnerEvidence, requested: str | None = None, for_run: bool = False) -> Ownership:
    """Decide the owner; ``requested`` is ``--imex-owner`` (None: detect). ``for_run``: the
    caller is ``nvfabric run``, which becomes the host owner when nothing else claims the node.

    Raises ValueError for an owner not in :data:`OWNERS`.
    """
    if requested is not None and requested not in OWNERS:
        raise ValueError(f"unknown IMEX owner {requested!r}; known: {', '.join(OWNERS)}")
    detected = detect(ev)
    reasons: list[str] = []
    if requested is not None:
        owner, source = requested, "requested"
        reasons.append(f"--imex-owner {requested} (detected: {detected})")
    else:
        owner, source = detected, "detected"
        reasons.append(_why_detected(ev, detected))
    runner: str | None = None
    if owner == "none" and requested is None and for_run:
        owner, runner = "host", "nvfabric"
        reasons.append("no other owner on this node: nvfabric run starts and supervises "
                       "nvidia-imex")
    elif owner == "host":
        if ev.unit_active and not (for_run and requested == "host"):
            runner = "unit"
            reasons.append(f"{HOST_UNIT} runs IMEX; nvfabric starts no second daemon")
        else:
            runner = "nvfabric" if for_run else ("unit" if ev.unit_active else None)
    conflict = _conflict(ev, owner, requested, for_run)
    return Ownership(owner, source, runner, ev.lines(), tuple(reasons), conflict)


def _why_detected(ev: OwnerEvidence, detected: str) -> str:
    if detected == "dra":
        return "DRA driver kubelet plugin state present: the DRA driver runs IMEX per ComputeDomain"
    if detected == "slurm":
        return "Slurm manages IMEX per job (prolog or switch/nvidia_imex)"
    if detected == "host":
        return f"{HOST_UNIT} is enabled: the host runs IMEX"
    if ev.unit_masked:
        return f"{HOST_UNIT} is masked and no DRA or Slurm evidence: nothing runs IMEX"
    return "no DRA plugin state, no enabled host unit, no Slurm prolog: nothing runs IMEX"


def _conflict(ev: OwnerEvidence, owner: str, requested: str | None,
              for_run: bool) -> Finding | None:
    if (owner == "dra" or ev.dra) and ev.unit_active:
        return Finding(
            "imex_owner_conflict", "error",
            f"the DRA driver owns IMEX on this node and {HOST_UNIT} is enabled: two IMEX "
            "daemons fail with 'Failed to allocate Imex session ... NV_ERR_IN_USE'",
            f"on DRA nodes disable and mask the host unit: {DRA_HOST_UNIT_FIX}",
            {"owners": ["dra", "host"], "evidence": list(ev.lines())},
        )
    if requested == "host" and ev.dra:
        return Finding(
            "imex_owner_conflict", "error",
            "--imex-owner host on a node with DRA driver ComputeDomain state: the DRA driver "
            "starts its own IMEX daemon here",
            "run with --imex-owner dra (the DRA driver owns IMEX), or remove the node from the "
            "DRA driver's ComputeDomains before the host runs IMEX",
            {"owners": ["host", "dra"], "evidence": list(ev.lines())},
        )
    if for_run and requested == "host" and ev.unit_active:
        return Finding(
            "imex_owner_conflict", "error",
            f"--imex-owner host under nvfabric run while {HOST_UNIT} is enabled: it and "
            "nvfabric would each start nvidia-imex",
            f"let nvfabric supervise IMEX: systemctl disable --now {HOST_UNIT}; or leave IMEX to "
            "the unit and run without --imex-owner",
            {"owners": ["host", "host"], "evidence": list(ev.lines())},
        )
    return None


@dataclass(frozen=True)
class UnitPolicy:
    """What to do with :data:`HOST_UNIT` after the IMEX package is installed: ``action``
    ``enable`` | ``disable``; ``now`` whether a live host also starts/stops it (``--now``);
    ``reason`` the sentence the output gives."""

    action: str
    now: bool
    reason: str


def unit_policy(owner: str) -> UnitPolicy:
    """The host unit follows its owner (nvfabric issue 17; NVIDIA GPU Operator, "NVIDIA DRA
    Driver for GPUs": the host unit must not run on ComputeDomain nodes; Azure/aks-gpu leaves it
    off): ``host`` -> enabled (and started on a live host); ``dra`` and ``none`` -> disabled and
    stopped; ``slurm`` -> disabled but not stopped (the job prolog starts it per job with the
    job's node list, and a running job keeps its daemon). ValueError for an unknown owner."""
    if owner == "host":
        return UnitPolicy("enable", True,
                          f"the host owns IMEX: {HOST_UNIT} runs the node-wide daemon")
    if owner == "dra":
        return UnitPolicy("disable", True,
                          "the DRA driver runs IMEX per ComputeDomain in its pods with the host "
                          f"binary; a node-wide {HOST_UNIT} would hold the IMEX session "
                          "(NV_ERR_IN_USE)")
    if owner == "none":
        return UnitPolicy("disable", True,
                          f"no owner runs IMEX here: {HOST_UNIT} stays off until one is chosen "
                          "(DRA driver, Slurm prolog, or --imex-owner host)")
    if owner == "slurm":
        return UnitPolicy("disable", False,
                          "the Slurm prolog starts IMEX per job with the job's node list; "
                          "nothing starts it at boot")
    raise ValueError(f"unknown IMEX owner {owner!r}; known: {', '.join(OWNERS)}")
