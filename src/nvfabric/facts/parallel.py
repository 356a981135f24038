"""Independent probes run side by side: each in its own thread, its answer (or its exception)
collected where it is needed.

The probes of ``run``'s preflight are mostly waits on other processes (``nv-fabricmanager
--version``, the node's nvidia-smi, NVML's first call): one after the other they cost the sum
of their times before NVLSM may start, side by side the longest one. Threads, not
processes: the work is waiting (the GIL is released), and a thread costs ~0.1 ms to start.
A stop signal ends a probe's wait in its thread (:mod:`nvfabric.effects.stop`): its
``Stopped`` is raised again where the answer is asked for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from nvfabric.effects import stop

T = TypeVar("T")


class Pending(Generic[T]):
    """The answer of ``fn()`` computed in a daemon thread started at construction.

    :meth:`result` waits for it and returns it, or raises what ``fn`` raised (the same
    exception object, so callers handle it as if they had called ``fn`` themselves). A daemon
    thread: a command that exits before asking (a refusal) does not wait for the probe.
    """

    def __init__(self, fn: Callable[[], T], name: str = "probe") -> None:
        self._fn = fn
        self._value: list[T] = []  # one element once fn returned
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"nvfabric-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        stop.block_in_thread()  # stop signals go to the main thread (effects.stop)
        try:
            self._value.append(self._fn())
        except BaseException as err:  # noqa: BLE001 - handed to the caller by result()
            self._error = err

    def result(self) -> T:
        """Wait for ``fn()``; its value, or its exception raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value[0]
