"""The supervisor of a run: :class:`Supervisor` wires the unit state machine
(:mod:`nvfabric.supervisor.unit`) to the real event loop (:mod:`nvfabric.supervisor.loop`) on
the monotonic clock, and :meth:`Supervisor.snapshot` reads the unit's state for a status
endpoint."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from nvfabric.bringup.spec import ServiceSpec
from nvfabric.effects.log import Log
from nvfabric.effects.notify import SYSTEMD_ENV, watchdog_usec
from nvfabric.model.findings import Finding
from nvfabric.supervisor.loop import Loop
from nvfabric.supervisor.outcome import Outcome
from nvfabric.supervisor.policy import Classifier, GpuCheck, Policy
from nvfabric.supervisor.timers import Clock
from nvfabric.supervisor.unit import Unit

_running: list[Supervisor] = []
_finished: list[Supervisor] = []


def running() -> Supervisor | None:
    """The supervisor whose :meth:`Supervisor.run` is going on in this process (the lean
    supervisor process runs one), else None: where a status endpoint or a metrics exporter in
    the same process reads :meth:`Supervisor.snapshot` from (any thread)."""
    return _running[-1] if _running else None


def latest() -> Supervisor | None:
    """The supervisor running now, else the one that ran last in this process (its unit
    done, its outcome set): what is read for the end of a run (the last publish)."""
    return _running[-1] if _running else _finished[-1] if _finished else None


class Supervisor:
    """Runs ``specs`` as one unit under ``policy``; :meth:`run` blocks until the unit ends
    and returns its :class:`Outcome`. Must be called from the main thread (signals).

    ``classifier(name)`` makes the live diagnosis of one service's lines; ``probe()`` reads
    the GPUs' fabric state (needed when a spec has ``ready_gpus``); ``ready_file`` is written
    when the unit is ready and removed when it stops; ``pid_dir`` gets ``<service>.pid`` for
    each running service (what ``nvfabric status`` looks for); ``preflight()`` is checked
    again before a restart; ``clock``: seconds, monotonic (a test may inject its own).
    """

    def __init__(
        self,
        specs: Sequence[ServiceSpec],
        policy: Policy | None = None,
        *,
        log: Log | None = None,
        classifier: Callable[[str], Classifier] | None = None,
        probe: Callable[[], GpuCheck] | None = None,
        ready_file: str | None = None,
        ready_info: dict[str, object] | None = None,
        pid_dir: str | None = None,
        preflight: Callable[[], Sequence[Finding]] | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.policy = policy or Policy()
        self.log = log or Log()
        reap = self.policy.reap_orphans
        self.loop = Loop(clock, probe, self.log, os.getpid() == 1 if reap is None else reap)
        env = {k: v for k, v in os.environ.items() if k not in SYSTEMD_ENV}
        self.unit = Unit(specs, self.policy, self.loop, self.log, env=env,
                         classifier=classifier, ready_file=ready_file, ready_info=ready_info,
                         pid_dir=pid_dir, preflight=preflight)

    def run(self) -> Outcome:
        """Start the unit and supervise it until it stops; see :mod:`nvfabric.supervisor`."""
        self.loop.open()
        _running.append(self)
        try:
            usec = watchdog_usec()
            # sd_watchdog_enabled(3): ping at half the interval
            self.unit.start(None if usec is None else usec / 2e6)
            self.loop.run(self.unit)
            assert self.unit.outcome is not None
            return self.unit.outcome
        finally:
            _running.remove(self)
            _finished[:] = [self]
            self.unit.kill_all()
            self.loop.close()

    def snapshot(self) -> list[dict[str, object]]:
        """The unit's state now, one dict per service in start order (see
        :meth:`nvfabric.supervisor.unit.Unit.snapshot`)."""
        return self.unit.snapshot()

    def fault(self) -> Finding | None:
        """The error that keeps the unit from being ready now, for publishing (any thread):
        the failure being handled (a service exited; while the unit waits and starts again
        after it, that exit), or the last error of a failed end (a refused restart); None
        while ready, before a first failure and after an orderly stop."""
        unit = self.unit
        outcome = unit.outcome
        if outcome is not None:
            errors = [f for f in outcome.findings if f.severity == "error"]
            return errors[-1] if outcome.exit_code and errors else None
        if unit.phase == "ready":
            return None
        if unit.failure:
            return unit.failure[0]
        past = unit._past_exits  # the exit that made the unit start again (same package)
        return past[-1] if unit.phase == "starting" and unit.restarts and past else None
