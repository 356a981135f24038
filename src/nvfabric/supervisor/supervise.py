"""The supervisor of a run: :class:`Supervisor` wires the unit state machine
(:mod:`nvfabric.supervisor.machine`) to the real event loop (:mod:`nvfabric.supervisor.loop`)
on the monotonic clock, and :meth:`Supervisor.snapshot` reads the unit's state for a status
endpoint."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from nvfabric.bringup.spec import ServiceSpec
from nvfabric.effects.log import Log
from nvfabric.effects.notify import SYSTEMD_ENV, watchdog_usec
from nvfabric.model.findings import Finding
from nvfabric.model.gpucheck import GpuCheck
from nvfabric.supervisor import running
from nvfabric.supervisor.loop import Loop
from nvfabric.supervisor.machine import Unit
from nvfabric.supervisor.outcome import Outcome
from nvfabric.supervisor.policy import Classifier, Policy
from nvfabric.supervisor.timers import Clock


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
        running.enter(self)
        try:
            usec = watchdog_usec()
            # sd_watchdog_enabled(3): ping at half the interval
            self.unit.start(None if usec is None else usec / 2e6)
            self.loop.run(self.unit)
            assert self.unit.outcome is not None
            return self.unit.outcome
        finally:
            running.leave(self)
            self.unit.kill_all()
            self.loop.close()

    def snapshot(self) -> list[dict[str, object]]:
        """The unit's state now, one dict per service in start order (see
        :meth:`nvfabric.supervisor.machine.Unit.snapshot`)."""
        return self.unit.snapshot()
