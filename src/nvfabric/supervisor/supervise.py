"""The supervisor of a run: :class:`Supervisor` wires the unit state machine
(:mod:`nvfabric.supervisor.machine`) to the real event loop (:mod:`nvfabric.supervisor.loop`)
on the monotonic clock, with what watches beside the unit (the kernel log,
:mod:`nvfabric.supervisor.kernelwatch`) and the run's event history
(:mod:`nvfabric.effects.history`); :meth:`Supervisor.snapshot` and
:meth:`Supervisor.kernel_events` read the unit's state and the kernel's events for a status
endpoint."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from nvfabric.bringup.spec import ServiceSpec
from nvfabric.effects.log import Log
from nvfabric.effects.notify import SYSTEMD_ENV, watchdog_usec
from nvfabric.model.commandline import HintContext
from nvfabric.model.findings import Finding
from nvfabric.model.gpucheck import GpuCheck
from nvfabric.supervisor import running
from nvfabric.supervisor.loop import Loop
from nvfabric.supervisor.machine import Unit
from nvfabric.supervisor.outcome import Outcome
from nvfabric.supervisor.policy import Classifier, Policy
from nvfabric.supervisor.timers import Clock

if TYPE_CHECKING:
    from nvfabric.supervisor.kernelwatch import KernelEvents

#: The event history's append: (kind, fields) (:meth:`nvfabric.effects.history.History.append`).
Record = Callable[[str, dict[str, Any]], None]


class Watcher(Protocol):
    """What watches beside the unit (the kernel log: :mod:`nvfabric.supervisor.kernelwatch`):
    given the loop's readable descriptors, the unit's timers and its door for a finding that
    changes the verdict when the run starts, closed when it ends; ``snapshot()`` what it has
    seen (any thread)."""

    def attach(self, watch: Callable[[int, Callable[[], None]], None],
               unwatch: Callable[[int], None],
               at: Callable[[str, float, Callable[[], None]], None],
               on_level: Callable[[Finding, str], None] | None) -> None: ...

    def close(self) -> None: ...

    def snapshot(self) -> KernelEvents: ...


class RecordingLog(Log):
    """The run's log, each finding also a record of the event history (``exit`` for a
    service that exited, else ``finding``)."""

    def __init__(self, log: Log, record: Record) -> None:
        super().__init__(log.stream)
        self._record = record

    def finding(self, f: Finding) -> None:
        super().finding(f)
        self._record("exit" if f.code == "service_exited" else "finding", f.to_json())


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
        hints: HintContext | None = None,
    ) -> None:
        self.policy = policy or Policy()
        self.log = log or Log()
        self.watch = watch
        self._kernel = None if watch is None else watch.snapshot  # kept after the close
        self.history = history
        if history is not None:
            self.log = RecordingLog(self.log, history)
        reap = self.policy.reap_orphans
        self.loop = Loop(clock, probe, self.log, os.getpid() == 1 if reap is None else reap)
        env = {k: v for k, v in os.environ.items() if k not in SYSTEMD_ENV}
        self.unit = Unit(specs, self.policy, self.loop, self.log, env=env,
                         classifier=classifier, ready_file=ready_file, ready_info=ready_info,
                         pid_dir=pid_dir, preflight=preflight, history=history, hints=hints)

    def run(self) -> Outcome:
        """Start the unit and supervise it until it stops; see :mod:`nvfabric.supervisor`."""
        self.loop.open()
        running.enter(self)
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
            running.leave(self)
            if self.watch is not None:
                self.watch.close()
            self.unit.kill_all()
            self.loop.close()

    def snapshot(self) -> list[dict[str, object]]:
        """The unit's state now, one dict per service in start order (see
        :meth:`nvfabric.supervisor.machine.Unit.snapshot`)."""
        return self.unit.snapshot()

    def kernel_events(self) -> KernelEvents | None:
        """What the kernel log watch has seen since the run started (any thread; None when
        the kernel log is not watched)."""
        return None if self._kernel is None else self._kernel()
