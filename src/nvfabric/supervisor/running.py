"""The supervisor whose run is going on in this process (the lean supervisor process runs one;
``run --listen`` and ``run --publish`` run it in the command's process), and the one that ran
last: where a status endpoint, a metrics exporter or the publisher in the same process reads
its state from, from any thread, without importing the supervisor itself
(:func:`nvfabric.observe.unitstate.of_running`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from nvfabric.supervisor.kernelwatch import KernelEvents
    from nvfabric.supervisor.machine import Unit


class Running(Protocol):
    """What a reader may look at of a running supervisor: its unit state machine, the
    snapshot of its services (:meth:`nvfabric.supervisor.supervise.Supervisor.snapshot`) and
    the kernel log's events (:meth:`nvfabric.supervisor.supervise.Supervisor.kernel_events`)."""

    unit: Unit

    def snapshot(self) -> list[dict[str, object]]: ...

    def kernel_events(self) -> KernelEvents | None: ...


_running: list[Running] = []
_finished: list[Running] = []
_at_end: list[Callable[[], None]] = []


def enter(sup: Running) -> None:
    """``sup`` runs from now on (:meth:`nvfabric.supervisor.supervise.Supervisor.run`)."""
    _running.append(sup)


def leave(sup: Running) -> None:
    """``sup`` has stopped running (its unit done, its outcome set); it stays :func:`latest`
    until another one ends."""
    _running.remove(sup)
    _finished[:] = [sup]


def current() -> Running | None:
    """The supervisor running in this process now, else None."""
    return _running[-1] if _running else None


def latest() -> Running | None:
    """The supervisor running now, else the one that ran last in this process: what is read
    for the end of a run (the last publish)."""
    return _running[-1] if _running else _finished[-1] if _finished else None


def at_end(fn: Callable[[], None]) -> None:
    """Call ``fn`` when the run of this process ends (:func:`end`), before the process exits:
    what must still be said then (``run --publish``: the last publish)."""
    _at_end.append(fn)


def end() -> None:
    """The run ends (:func:`nvfabric.supervisor.lean.finish`, which exits without running
    ``atexit``): call what :func:`at_end` registered, once each (each bounds itself)."""
    while _at_end:
        _at_end.pop(0)()
