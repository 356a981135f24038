"""A snapshot of the supervised unit, for metrics and probes: per service its state, pid,
restarts and exits by reason; for the unit whether it is ready (the rule of ``READY=1``) and
how long the last start took to get there.

The values are plain and frozen, so the HTTP thread can read the snapshot the event loop
published without a lock. :func:`of_supervisor` is the one seam to the supervisor: it reads
the attributes the supervisor keeps (see the function) and is the only function to change
when the supervisor offers its own snapshot hook.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nvfabric.supervisor.running import Running, current

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


def of_supervisor(sup: Running) -> UnitSnapshot:
    """The unit state of a running :class:`nvfabric.supervisor.supervise.Supervisor`, from its own
    snapshot (:meth:`nvfabric.supervisor.supervise.Supervisor.snapshot`: per service state, pid,
    restarts and exits by reason; orderly stops are not counted here) plus the unit's phase
    and seconds to ready. Safe from another thread: the snapshot is built fresh from plain
    values; it may be one event behind, never torn inside one service."""
    unit = sup.unit
    phase = unit.phase
    services = []
    for s in sup.snapshot():
        raw = str(s["state"])
        state: ServiceRun = "ready" if raw == "ready" else "running" if raw in (
            "starting", "stopping") else "exited" if raw == "exited" else "not_started"
        exits = s["exits"] if isinstance(s["exits"], dict) else {}
        pid = s["pid"]
        restarts = s["restarts"]
        services.append(ServiceSnapshot(
            str(s["service"]), state, pid if isinstance(pid, int) else None,
            restarts if isinstance(restarts, int) else 0,
            tuple((r, int(exits[r])) for r in EXIT_REASONS if exits.get(r))))
    ready_after = unit.ready_after
    return UnitSnapshot(tuple(services), phase == "ready",
                        None if ready_after is None else round(ready_after, 3), unit.restarts,
                        phase, phase != "done")


def phase_of_running() -> str:
    """The phase word of the supervisor running in this process now (``idle`` before it
    starts): what :func:`of_running` would report as ``phase``, without building the rest."""
    sup = current()
    return "idle" if sup is None else sup.unit.phase


def of_running() -> UnitSnapshot:
    """The unit state of the supervisor running in this process now
    (:func:`nvfabric.supervisor.running.current`); before it starts, an idle unit."""
    sup = current()
    return UnitSnapshot() if sup is None else of_supervisor(sup)
