"""The event loop of a run: one epoll(7) loop over the signal wakeup pipe, each daemon's
output, the inotify watch of NVLSM's socket directory and the GPU probe's answers, with the
unit's timers (:mod:`nvfabric.supervisor.timers`) on an injected clock. :class:`Loop` is the
real :class:`~nvfabric.supervisor.host.Host` of the unit state machine.

Signals arrive through ``signal.set_wakeup_fd`` (the Python-level handler does nothing), so a
stop or a child's exit wakes the loop at once. The GPU probe (a slow ``nvidia-smi`` or NVML
read) runs in a worker thread so that it never delays the reaction to a dying daemon; its
answer wakes the loop through a pipe. (``nvfabric run``'s probe forks its reading into a
short-lived child from that thread, :mod:`nvfabric.supervisor.gpuprobe`.) As PID 1 every
exited child is reaped, orphans included (skipped while the probe runs, whose own child, the
probe's or its subprocess call's, the probe must collect).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
from collections import deque
from collections.abc import Callable, Sequence

from nvfabric.effects import process, stop
from nvfabric.effects.atomic import write_atomic
from nvfabric.effects.dirs import ensure_dir
from nvfabric.effects.log import Log
from nvfabric.effects.notify import sd_notify
from nvfabric.effects.sockets import is_socket, listens, socket_listening
from nvfabric.model.gpucheck import GpuCheck
from nvfabric.supervisor.inotify import Inotify
from nvfabric.supervisor.machine import STOP_SIGNALS, Unit
from nvfabric.supervisor.resetcmd import run_reset
from nvfabric.supervisor.timers import Clock

Probe = Callable[[], GpuCheck]


def _noop_handler(signum: int, frame: object) -> None:
    """Signals are handled through the wakeup fd; the Python-level handler does nothing."""


class _Readers:
    """The loop's readable descriptors and their callbacks on one epoll(7) instance: what
    ``selectors.DefaultSelector`` (the epoll one on Linux) does for reading, without the
    :mod:`selectors` layer over it."""

    def __init__(self) -> None:
        self._epoll = select.epoll()  # close-on-exec
        self._callbacks: dict[int, Callable[[], None]] = {}

    def register(self, fd: int, callback: Callable[[], None]) -> None:
        """Call ``callback`` when ``fd`` is readable (or hung up). KeyError when ``fd`` is
        registered already; OSError (ValueError) for a descriptor epoll cannot watch."""
        if fd in self._callbacks:
            raise KeyError(f"{fd} is already registered")
        self._epoll.register(fd, select.EPOLLIN)
        self._callbacks[fd] = callback

    def unregister(self, fd: int) -> None:
        """Stop watching ``fd`` (already closed is fine). KeyError when it is not watched."""
        del self._callbacks[fd]
        with contextlib.suppress(OSError):
            self._epoll.unregister(fd)

    def ready(self, timeout: float | None) -> list[Callable[[], None]]:
        """The callbacks of the descriptors readable within ``timeout`` seconds (None: no
        limit), the wait rounded up to whole milliseconds (epoll's unit) as selectors does,
        so that a timer is never woken for too early."""
        if timeout is None:
            wait = -1.0
        elif timeout <= 0:
            wait = 0.0
        else:
            wait = -(-timeout * 1e3 // 1) * 1e-3
        events = self._epoll.poll(wait, max(len(self._callbacks), 1))
        return [self._callbacks[fd] for fd, _ in events if fd in self._callbacks]

    def close(self) -> None:
        self._epoll.close()


def _checked(probe: Probe) -> GpuCheck:
    try:
        return probe()
    except Exception as err:  # noqa: BLE001 - reported as a probe error
        return GpuCheck(False, False, "unreadable", f"{type(err).__name__}: {err}")


class Loop:
    """The host of one run (see the module docstring): set up by :meth:`open`, turned by
    :meth:`run` until the unit's outcome, undone by :meth:`close` (signal handlers and the
    wakeup fd restored). Must be used from the main thread (signals)."""

    def __init__(self, clock: Clock, probe: Probe | None, log: Log,
                 reap_orphans: bool) -> None:
        self.now = clock
        self.log = log
        self._probe_fn = probe
        self._reap_orphans = reap_orphans
        self._sel = _Readers()
        self._sig_r, self._sig_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._old_handlers: dict[int, object] = {}
        self._old_wakeup = -1
        self._old_mask: set[int | signal.Signals] | None = None
        self._probe_lock = threading.Lock()
        self._probe_busy = False
        self._reap_pending = False
        # one probe at a time: asked for by setting the event (the worker clears it when it
        # starts), answered through the deque (append and popleft are atomic) and a byte on
        # the wake pipe; _closing (then the event) ends the worker
        self._probe_wanted = threading.Event()
        self._probe_results: deque[GpuCheck] = deque()
        self._closing = False
        self._probe_thread: threading.Thread | None = None
        self.unit: Unit | None = None

    def pid(self) -> int:
        return os.getpid()

    # ----------------------------------------------------------------- setup, run, teardown

    def open(self) -> None:
        """Route the stop signals, SIGCHLD and SIGHUP to the loop; start the probe worker."""
        self._old_wakeup = signal.set_wakeup_fd(self._sig_w, warn_on_full_buffer=False)
        routed = (*STOP_SIGNALS, signal.SIGCHLD, signal.SIGHUP)
        for sig in routed:
            self._old_handlers[sig] = signal.signal(sig, _noop_handler)
        # blocked across the exec into the lean supervisor (a stop asked for meanwhile stays
        # pending): from here on they are handled
        self._old_mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, routed)
        self._sel.register(self._sig_r, self._on_signal)
        self._sel.register(self._wake_r, self._on_wake)
        # a stop the command recorded before the loop took the signals over (one that a
        # thread of its took after the hand-over, nvfabric.effects.stop.handover) is the
        # loop's first event
        if stop.received():
            os.write(self._sig_w, bytes([stop.received()]))
        if self._probe_fn is not None:
            self._probe_thread = threading.Thread(
                target=self._probe_worker, name="nvfabric-gpu-probe", daemon=True)
            self._probe_thread.start()

    def run(self, unit: Unit) -> None:
        """Turn until ``unit`` has its outcome."""
        self.unit = unit
        while unit.outcome is None:
            for callback in self._sel.ready(unit.timers.next_timeout()):
                callback()
                if unit.outcome is not None:
                    break
            unit.timers.fire_due(lambda: unit.outcome is not None)

    def close(self) -> None:
        """Undo :meth:`open`. The probe worker is told to end and not waited for (a daemon
        thread: a probe in flight must not delay the exit of a run whose daemon died)."""
        if self._probe_thread is not None:
            self._closing = True
            self._probe_wanted.set()
        if self._old_mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._old_mask)
        signal.set_wakeup_fd(self._old_wakeup)
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._sel.close()
        for fd in (self._sig_r, self._sig_w, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # ----------------------------------------------------------------- events

    def _on_signal(self) -> None:
        try:
            data = os.read(self._sig_r, 512)
        except BlockingIOError:
            return
        assert self.unit is not None
        got_chld = False
        for signum in data:
            if signum == signal.SIGCHLD:
                got_chld = True
            else:
                self.unit.on_signal(signum)
        if got_chld:
            self._reap()

    def _reap(self) -> None:
        assert self.unit is not None
        self.unit.reap()
        if self.unit.outcome is None and self._reap_orphans:
            self._reap_others()

    def _reap_others(self) -> None:
        """As PID 1: reap every exited child (orphans re-parented to us). Skipped while the
        GPU probe runs, whose own child's status its subprocess call must collect."""
        if not self._probe_lock.acquire(blocking=False):
            self._reap_pending = True
            return
        try:
            self._reap_pending = False
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                assert self.unit is not None
                self.unit.on_pid_exit(pid, status)
        finally:
            self._probe_lock.release()

    def _on_wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self._wake_r, 4096)
        assert self.unit is not None
        while self._probe_results:
            result = self._probe_results.popleft()
            self._probe_busy = False
            self.unit.on_probe(result)
        if self._reap_pending:
            self._reap()

    # ----------------------------------------------------------------- the GPU probe

    def _probe_worker(self) -> None:
        assert self._probe_fn is not None
        while True:
            self._probe_wanted.wait()
            if self._closing:
                return
            self._probe_wanted.clear()
            with self._probe_lock:
                result = _checked(self._probe_fn)
            self._probe_results.append(result)
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"p")

    def request_probe(self) -> bool:
        if self._probe_fn is None:
            return False
        if not self._probe_busy:
            self._probe_busy = True
            self._probe_wanted.set()
        return True

    def probe_now(self) -> GpuCheck | None:
        if self._probe_fn is None:
            return None
        with self._probe_lock:
            return _checked(self._probe_fn)

    def run_reset(self, argv: Sequence[str], timeout_s: float, tick: Callable[[], float]
                  ) -> tuple[int | None, bytes, str | None]:
        return run_reset(argv, timeout_s, tick, self._sig_r, self.log, self.now)

    # ----------------------------------------------------------------- processes and files

    def spawn(self, argv: Sequence[str], env: dict[str, str]) -> tuple[int, int]:
        return process.spawn(argv, env)

    def kill(self, pid: int, sig: int) -> None:
        process.kill_group(pid, sig)

    def reap(self, pid: int) -> int | None:
        return process.reap(pid)

    def wait(self, pid: int) -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)

    def watch_output(self, fd: int, on_readable: Callable[[], None]) -> None:
        self._sel.register(fd, on_readable)

    def read(self, fd: int) -> bytes | None:
        try:
            return os.read(fd, 65536)
        except BlockingIOError:
            return None
        except OSError:
            return b""

    def close_output(self, fd: int) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(fd)
        with contextlib.suppress(OSError):
            os.close(fd)

    def watch_dir(self, directory: str, on_change: Callable[[], None]) -> object:
        watch = Inotify(directory)
        self._sel.register(watch.fd, on_change)
        return watch

    def drain_watch(self, handle: object) -> None:
        assert isinstance(handle, Inotify)
        handle.drain()

    def unwatch(self, handle: object) -> None:
        assert isinstance(handle, Inotify)
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(handle.fd)
        handle.close()

    def is_socket(self, path: str) -> bool:
        return is_socket(path)

    def socket_listening(self, path: str) -> bool:
        return socket_listening(path)

    def socket_listens(self, path: str) -> bool | None:
        return listens(path)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def ensure_dir(self, path: str) -> bool:
        return ensure_dir(path)

    def executable(self, path: str) -> bool:
        return os.path.isfile(path) and os.access(path, os.X_OK)

    def notify(self, message: str) -> bool:
        return sd_notify(message)

    def write_file(self, path: str, text: str) -> None:
        write_atomic(path, text, mode=0o644, backup=False, dir_mode=0o700)

    def remove_file(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def read_small(self, path: str) -> str:
        # a pid file: one short line (a damaged one is compared, never decoded strictly)
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(64)
