"""The supervisor of a run: :class:`Supervisor` wires the unit state machine
(:mod:`nvfabric.supervisor.unit`) to the real event loop (:mod:`nvfabric.supervisor.loop`) on
the monotonic clock, and :meth:`Supervisor.snapshot` reads the unit's state for a status
endpoint."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

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

#: The event history's append: (kind, fields) (:meth:`nvfabric.observe.history.History.append`).
Record = Callable[[str, dict[str, Any]], None]


class Watcher(Protocol):
    """What watches beside the unit (the kernel log: :mod:`nvfabric.observe.kernelwatch`):
    given the loop's readable descriptors, the unit's timers and its door for a finding that
    changes the verdict when the run starts, closed when it ends."""

    def attach(self, watch: Callable[[int, Callable[[], None]], None],
               unwatch: Callable[[int], None],
               at: Callable[[str, float, Callable[[], None]], None],
               on_level: Callable[[Finding, str], None] | None) -> None: ...

    def close(self) -> None: ...


class RecordingLog(Log):
    """The run's log, each finding also a record of the event history (``exit`` for a
    service that exited, else ``finding``)."""

    def __init__(self, log: Log, record: Record) -> None:
        super().__init__(log.stream)
        self._record = record

    def finding(self, f: Finding) -> None:
        super().finding(f)
        self._record("exit" if f.code == "service_exited" else "finding", f.to_json())


def running() -> Supervisor | None:
    """The supervisor whose :meth:`Supervisor.run` is going on in this process (the lean
    supervisor process runs one), else None: where a status endpoint or a metrics exporter in
    the same process reads :meth:`Supervisor.snapshot` from (any thread)."""
    return _running[-1] if _running else None


class Supervisor:
    """Runs ``specs`` as one unit under ``policy``; :meth:`run` blocks until the unit ends
    and returns its :class:`Outcome`. Must be called from the main thread (signals).

    ``classifier(name)`` makes the live diagnosis of one service's lines; ``probe()`` reads
    the GPUs' fabric state (needed when a spec has ``ready_gpus``); ``ready_file`` is written
    when the unit is ready and removed when it stops; ``pid_dir`` gets ``<service>.pid`` for
    each running service (what ``nvfabric status`` looks for); ``preflight()`` is checked
    again before a restart; ``clock``: seconds, monotonic (a test may inject its own);
    ``watch`` watches beside the unit (the kernel log); ``history`` records the run's events.
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
        watch: Watcher | None = None,
        history: Record | None = None,
    ) -> None:
        self.policy = policy or Policy()
        self.log = log or Log()
        self.watch = watch
        self.history = history
        if history is not None:
            self.log = RecordingLog(self.log, history)
        reap = self.policy.reap_orphans
        self.loop = Loop(clock, probe, self.log, os.getpid() == 1 if reap is None else reap)
        env = {k: v for k, v in os.environ.items() if k not in SYSTEMD_ENV}
        self.unit = Unit(specs, self.policy, self.loop, self.log, env=env,
                         classifier=classifier, ready_file=ready_file, ready_info=ready_info,
                         pid_dir=pid_dir, preflight=preflight)
        self.unit.history = history

    def run(self) -> Outcome:
        """Start the unit and supervise it until it stops; see :mod:`nvfabric.supervisor`."""
        self.loop.open()
        _running.append(self)
        try:
            if self.watch is not None:  # the kernel log: one more readable descriptor
                self.watch.attach(self.loop.watch_readable, self.loop.unwatch_readable,
                                  self.unit.timers.at, self.unit.on_kernel_finding)
            usec = watchdog_usec()
            # sd_watchdog_enabled(3): ping at half the interval
            self.unit.start(None if usec is None else usec / 2e6)
            self.loop.run(self.unit)
            assert self.unit.outcome is not None
            if self.watch is not None:  # its last counts go before the end's record
                self.watch.close()
                self.watch = None
            if self.history is not None:
                self.history("stop", {"result": self.unit.outcome.reason,
                                      "exit_code": self.unit.outcome.exit_code,
                                      "restarts": self.unit.outcome.restarts})
            return self.unit.outcome
        finally:
            _running.remove(self)
            if self.watch is not None:
                self.watch.close()
            self.unit.kill_all()
            self.loop.close()

    def snapshot(self) -> list[dict[str, object]]:
        """The unit's state now, one dict per service in start order (see
        :meth:`nvfabric.supervisor.unit.Unit.snapshot`)."""
        return self.unit.snapshot()
