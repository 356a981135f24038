"""Publishing beside supervision: one daemon thread that tells the API server the newest view of
the fabric and never holds up the run (:class:`Beside`), and the one-shot of
``nvfabric status --publish`` (:func:`once`).

The thread looks at its source (the snapshot ``run --listen`` serves: the last reading and the
unit now) every :data:`POLL_S` seconds, a read of values in memory; it writes only what changed
(:class:`nvfabric.publish.node.NodePublisher`) and the heartbeat. The API server is not the
fabric: when it is unreachable or slow (every call bounded), refuses (403) or conflicts (409),
the thread backs off (:class:`Backoff`: capped, with jitter) and tries again with the newest
view, so nothing queues but the bounded Events; a 403 is said once, one line naming the
missing permission. A failure is counted by kind (``nvfabric_kube_publish_total{result}``) and
the last success kept (:class:`nvfabric.observe.metrics.KubePublish`, in ``/metrics`` and
``/status``). When the run ends, :meth:`Beside.stop` publishes the last view within a bound.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from nvfabric.effects.log import Log
from nvfabric.observe.metrics import KubePublish
from nvfabric.publish.api import RESULTS, Api, PublishError, Target
from nvfabric.publish.node import NodePublisher, Options
from nvfabric.rules.cluster import FabricView

#: Seconds between two looks at the source (values in memory, no I/O).
POLL_S = 0.25
#: The back-off: the first delay, its cap (seconds); each failure doubles it, a success
#: resets it; the delay slept is drawn uniformly from its upper half (jitter: a fleet that lost
#: its API server at once does not come back at once).
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0
#: Seconds :meth:`Beside.stop` gives the last publish.
FLUSH_S = 3.0


class Backoff:
    """Capped exponential back-off with jitter; ``draw()`` in [0, 1)."""

    def __init__(self, base_s: float = BACKOFF_BASE_S, cap_s: float = BACKOFF_CAP_S,
                 draw: Callable[[], float] = random.random) -> None:
        self.base_s, self.cap_s, self._draw = base_s, cap_s, draw
        self.failures = 0

    def next(self) -> float:
        """Seconds to wait after one more failure."""
        ceiling = min(self.cap_s, self.base_s * 2.0 ** min(self.failures, 30))
        self.failures += 1
        return ceiling * (0.5 + 0.5 * self._draw())

    def reset(self) -> None:
        self.failures = 0


class Tally:
    """The counts by result and the last success, read from any thread as one value."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._counts = dict.fromkeys(RESULTS, 0)
        self._last_success: float | None = None
        self._last_error: str | None = None
        self._lock = threading.Lock()

    def count(self, result: str, error: str | None = None, at: float | None = None) -> None:
        with self._lock:
            self._counts[result] = self._counts.get(result, 0) + 1
            if result == "ok":
                self._last_success = time.time() if at is None else at
                self._last_error = None
            else:
                self._last_error = error

    def value(self) -> KubePublish:
        with self._lock:
            return KubePublish(self.node, tuple(self._counts.items()), self._last_success,
                               self._last_error)


class Beside:
    """The publishing thread of a run: ``source()`` gives the newest view (None: nothing to
    say yet), ``connect()`` the API (made again after a configuration failure). ``say``: one
    log line (nvfabric's log)."""

    def __init__(self, connect: Callable[[], Api], node: str, options: Options,
                 source: Callable[[], FabricView | None], *,
                 say: Callable[[str], None] | None = None, backoff: Backoff | None = None,
                 poll_s: float = POLL_S) -> None:
        self._connect = connect
        self.node = node
        self.options = options
        self._source = source
        self._say = say or (lambda text: Log().say(f"kube publish: {text}"))
        self.backoff = backoff or Backoff()
        self.poll_s = poll_s
        self.tally = Tally(node)
        self._publisher: NodePublisher | None = None
        self._stop = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._said: str | None = None
        self._failing = 0
        self._started = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="nvfabric-kube-publish",
                                        daemon=True)
        self._thread.start()

    def stop(self, flush_s: float = FLUSH_S) -> None:
        """Stop the thread after one last publish of the newest view, waiting at most
        ``flush_s`` seconds (the thread is a daemon: a hung call never holds the exit)."""
        self._stop.set()
        if self._thread is not None:
            self._done.wait(flush_s)

    def step(self) -> float:
        """One publish of the newest view; the seconds to wait before the next."""
        view = self._source()
        if view is None:
            return self.poll_s
        try:
            if self._publisher is None:
                self._publisher = NodePublisher(self._connect(), self.node, self.options,
                                                notice=self._say)
            calls = self._publisher.publish(view)
        except PublishError as err:
            return self._failed(err)
        if calls:
            self.tally.count("ok")
            if self._failing:
                self._say(f"node {self.node} published again after {self._failing} failed "
                          "tries")
            elif not self._started:
                self._say(f"publishing to node {self.node}: conditions NVLinkFabricUnhealthy "
                          "and NVLinkFabricDegraded, labels, events")
            self._started = True
        self._failing = 0
        self._said = None
        self.backoff.reset()
        return self.poll_s

    def _failed(self, err: PublishError) -> float:
        """Count ``err``, say it when it is a new kind of trouble (one line, not one per try;
        a 403 names the permission), and back off."""
        self.tally.count(err.kind, err.message)
        self._failing += 1
        if err.kind == "config":
            self._publisher = None  # connect again (a token or CA file may come back)
        key = err.permission or err.kind
        if key != self._said:
            self._said = key
            fix = (" (the ClusterRole of deploy/kubernetes/base/rbac.yaml grants it)"
                   if err.kind == "forbidden" else "")
            self._say(f"{err.message}{fix}; retrying with back-off")
        return self.backoff.next()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    delay = self.step()
                except Exception as err:  # noqa: BLE001 - publishing must outlive a bug
                    self.tally.count("invalid", f"{type(err).__name__}: {err}")
                    self._say(f"internal error, retrying with back-off: "
                              f"{type(err).__name__}: {err}")
                    delay = self.backoff.next()
                self._stop.wait(delay)
            try:  # the end of the run: say it, once, within the bound of stop()
                self.step()
            except Exception:  # noqa: BLE001, S110 - the process is ending
                pass
        finally:
            self._done.set()


def once(target: Target, options: Options, view: FabricView) -> tuple[KubePublish, int]:
    """``status --publish``: publish ``view`` once; (the tally, API calls made). Raises
    PublishError."""
    api = Api(target)
    try:
        publisher = NodePublisher(api, target.node, options)
        calls = publisher.publish(view)
    finally:
        api.close()
    tally = Tally(target.node)
    tally.count("ok")
    return tally.value(), calls
