"""The supervisor whose run is going on in this process (the lean supervisor process runs one;
``run --listen`` runs it in the command's process): where a status endpoint or a metrics
exporter in the same process reads its state from, from any thread, without importing the
supervisor itself (:func:`nvfabric.observe.unitstate.of_running`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from nvfabric.supervisor.machine import Unit


class Running(Protocol):
    """What a reader may look at of a running supervisor: its unit state machine and the
    snapshot of its services (:meth:`nvfabric.supervisor.supervise.Supervisor.snapshot`)."""

    unit: Unit

    def snapshot(self) -> list[dict[str, object]]: ...


_running: list[Running] = []


def enter(sup: Running) -> None:
    """``sup`` runs from now on (:meth:`nvfabric.supervisor.supervise.Supervisor.run`)."""
    _running.append(sup)


def leave(sup: Running) -> None:
    """``sup`` has stopped running."""
    _running.remove(sup)


def current() -> Running | None:
    """The supervisor running in this process now, else None."""
    return _running[-1] if _running else None
