"""Where a run's supervisor meets the HTTP endpoint and the publisher, without importing them:
``run --listen`` (or ``--publish``) activates its :class:`nvfabric.observe.serve.Watch` here,
and the code that builds a supervisor calls :func:`attach` (a no-op when nothing serves, so
``run`` without ``--listen`` pays for no HTTP import). What must be said when the run ends
registers with :func:`nvfabric.supervisor.running.at_end`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nvfabric.observe.serve import Watch
    from nvfabric.observe.unitstate import UnitSnapshot
    from nvfabric.supervisor.kernelwatch import KernelEvents

_active: Watch | None = None


def activate(watch: Watch | None) -> None:
    """Make ``watch`` the one :func:`attach` feeds (one run per process; None: none)."""
    global _active
    _active = watch


def active() -> Watch | None:
    """The watch :func:`attach` feeds, if any."""
    return _active


def attach(unit: Callable[[], UnitSnapshot], imex: tuple[str, str] | None = None,
           phase: Callable[[], str] | None = None,
           kernel: Callable[[], KernelEvents | None] | None = None) -> None:
    """Give the active watch (if any) the unit state function of the supervisor that now runs
    the unit: ``attach(lambda: of_supervisor(sup))``; ``imex``: the IMEX daemon the reader
    asks for the domain state (full paths of nvidia-imex-ctl and the config it runs with).
    ``phase``: the unit's phase word alone, cheaper than a snapshot (the reader thread looks
    at it every few tenths of a second). ``kernel``: the kernel log watch's events
    (:func:`nvfabric.observe.unitstate.kernel_of_running`): ``/status`` and ``/metrics`` show
    them. A no-op when nothing serves."""
    if _active is not None:
        _active.unit = unit
        _active.phase = phase
        _active.imex = imex
        _active.kernel = kernel
        if imex is not None:
            _active.read_once()

