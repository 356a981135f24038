"""Named one-shot timers on an injected clock: what the unit state machine waits for (a grace
period, a restart delay, the next probe, a socket timeout, the watchdog ping).

The clock is any ``() -> float`` of seconds (``time.monotonic`` in a run, a fake in tests): the
timers never read time themselves, so a test moves the clock and fires what is due, in
microseconds instead of seconds.
"""

from __future__ import annotations

from collections.abc import Callable

#: The longest single wait of the loop: epoll_wait(2) takes its timeout in int milliseconds
#: (Python raises OverflowError past about 24.8 days), and a --grace, --ready-timeout or
#: $WATCHDOG_USEC may be longer; a timer further away is simply waited for again.
MAX_WAIT_S = 3600.0

Clock = Callable[[], float]


class Timers:
    """Timers by tag: setting a tag again replaces it; :meth:`fire_due` runs the callbacks
    whose deadline has passed, earliest first, skipping one cancelled or replaced meanwhile."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._due: dict[str, tuple[float, Callable[[], None]]] = {}

    def at(self, tag: str, delay: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` ``delay`` seconds from now (replacing the timer ``tag``)."""
        self._due[tag] = (self.clock() + delay, callback)

    def cancel(self, *tags: str) -> None:
        """Forget the timers ``tags`` (unknown tags are no error)."""
        for tag in tags:
            self._due.pop(tag, None)

    def cancel_all_but(self, keep: Callable[[str], bool]) -> None:
        """Forget every timer whose tag ``keep`` does not accept."""
        for tag in [t for t in self._due if not keep(t)]:
            del self._due[tag]

    def __contains__(self, tag: str) -> bool:
        return tag in self._due

    def tags(self) -> list[str]:
        """The pending timers' tags."""
        return list(self._due)

    def left(self, tag: str) -> float:
        """Seconds until timer ``tag`` is due (0 when overdue; inf when not set)."""
        entry = self._due.get(tag)
        return float("inf") if entry is None else max(0.0, entry[0] - self.clock())

    def next_timeout(self) -> float | None:
        """Seconds the loop may wait for the next timer (None: no timer, wait for events),
        at most :data:`MAX_WAIT_S`."""
        if not self._due:
            return None
        soonest = min(d for d, _ in self._due.values())
        return min(MAX_WAIT_S, max(0.0, soonest - self.clock()))

    def fire_due(self, done: Callable[[], bool] = lambda: False) -> None:
        """Run every timer due by now, earliest first; stop early once ``done()``."""
        now = self.clock()
        due = sorted((d, tag) for tag, (d, _) in self._due.items() if d <= now)
        for deadline, tag in due:
            if done():
                return
            entry = self._due.get(tag)
            if entry is not None and entry[0] == deadline:  # not cancelled or replaced since
                del self._due[tag]
                entry[1]()
