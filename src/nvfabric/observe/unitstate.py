"""A snapshot of the supervised unit, for metrics and probes: per service its state, pid,
restarts and exits by reason; for the unit whether it is ready (the rule of ``READY=1``) and
how long the last start took to get there.

The values are plain and frozen, so the HTTP thread can read the snapshot the event loop
published without a lock. :func:`of_supervisor` is the one seam to the supervisor: it reads
the attributes the supervisor keeps (see the function) and is the only function to change
when the supervisor offers its own snapshot hook (issue 11).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from nvfabric.supervisor import Supervisor

ServiceRun = Literal["running", "ready", "exited", "not_started"]
#: Why a service process ended: ``exit_code`` (a non-zero exit), ``clean`` (exit 0 while it
#: should have run on), ``signal`` (killed by a signal).
ExitReason = Literal["exit_code", "clean", "signal"]
EXIT_REASONS: tuple[ExitReason, ...] = ("exit_code", "clean", "signal")


@dataclass(frozen=True)
class ServiceSnapshot:
    """One fabric service of the unit. ``restarts``: times it was started again by the
    restart policy (the unit restarts as one, so every service counts the unit's restarts);
    ``exits``: its unexpected exits so far, by reason (orderly stops are not exits)."""

    service: str
    state: ServiceRun
    pid: int | None = None
    restarts: int = 0
    exits: tuple[tuple[ExitReason, int], ...] = ()

    @property
    def up(self) -> bool:
        return self.state in ("running", "ready")


@dataclass(frozen=True)
class UnitSnapshot:
    """The unit: ``ready`` is True exactly while the supervisor holds the unit ready (it sent
    ``READY=1`` and wrote the readiness file); ``ready_after_s`` seconds from the last start
    of the unit to ready (None until then); ``phase``: the supervisor's phase word
    (``starting``, ``ready``, ``stopping``, ``waiting``, ``done``; ``idle`` before a start)."""

    services: tuple[ServiceSnapshot, ...] = ()
    ready: bool = False
    ready_after_s: float | None = None
    restarts: int = 0
    phase: str = "idle"
    alive: bool = True


NOTHING_TO_RUN = UnitSnapshot(ready=True, phase="ready")
"""The unit of a node whose fabric needs no service (``run`` on fabric ``none``, ``--stay``):
ready, as ``READY=1`` is sent there too."""


def exit_reason(exit_code: object, signal: object) -> ExitReason:
    """The reason word of a ``service_exited`` finding's ``exit_code``/``signal`` fields."""
    if signal is not None:
        return "signal"
    return "clean" if exit_code == 0 else "exit_code"


def of_supervisor(sup: Supervisor) -> UnitSnapshot:
    """The unit state of a running :class:`nvfabric.supervisor.Supervisor`, read from what it
    keeps: its current processes (``_procs``: spec name, pid, ready, wait status), the
    restarts done (``_restarts``), the ``service_exited`` findings of failures a restart
    handled (``_past_exits``) and of the current failure (``_failure``), its phase and the
    seconds to ready. Safe from another thread: each attribute is read once and copied (the
    GIL makes each read atomic); a snapshot may be one event behind, never torn inside one
    service."""
    procs = list(sup._procs)
    exits: dict[str, Counter[ExitReason]] = {}
    for f in [*list(sup._past_exits), *list(sup._failure)]:
        if f.code != "service_exited":
            continue
        name = str(f.fields.get("service"))
        exits.setdefault(name, Counter())[
            exit_reason(f.fields.get("exit_code"), f.fields.get("signal"))] += 1
    restarts = sup._restarts
    phase = sup._phase
    services = []
    for spec in sup.specs:
        proc = next((p for p in procs if p.spec.name == spec.name), None)
        state: ServiceRun = "not_started"
        if proc is not None:
            state = "exited" if proc.status is not None else (
                "ready" if proc.ready else "running")
        counts = exits.get(spec.name, Counter())
        services.append(ServiceSnapshot(
            spec.name, state, None if proc is None else proc.pid,
            restarts,
            tuple((r, counts[r]) for r in EXIT_REASONS if counts[r])))
    ready_after = sup._ready_after
    return UnitSnapshot(tuple(services), phase == "ready",
                        None if ready_after is None else round(ready_after, 3), restarts,
                        phase, phase != "done")
