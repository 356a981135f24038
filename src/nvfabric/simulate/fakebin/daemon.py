"""What every fake daemon shares: printing, log stamps, KEY=VALUE configs, option
parsing, socket names that fit sockaddr_un, and the life of a daemon (:class:`Daemon`: SIGTERM,
crash timer, wait loop; :func:`daemonize`). Standard library only (copied into simulated trees).

Start-up cost: the module imports os (the launcher's), sys and time; :mod:`signal` only where a
daemon's life begins (:class:`Daemon`, :func:`daemonize`), the wait loop :mod:`select`; no
``contextlib`` or ``typing``.
"""

from __future__ import annotations

import os
import sys
import time

from .state import faults

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class short_path:
    """``with short_path(path) as name``: a name for ``path`` that fits in sockaddr_un (108
    bytes): the path itself when short, else ``/proc/self/fd/N/<name>`` through an O_PATH
    descriptor of its directory (closed when the block ends)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None

    def __enter__(self) -> str:
        if len(os.fsencode(self.path)) < 100:
            return self.path
        self.fd = os.open(os.path.dirname(self.path) or ".", os.O_PATH | os.O_DIRECTORY)
        return f"/proc/self/fd/{self.fd}/{os.path.basename(self.path)}"

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def say(text: str, stream: Any = None) -> None:
    out = stream if stream is not None else sys.stdout
    try:
        out.write(text + "\n")
        out.flush()
    except (OSError, ValueError):
        pass


def stamp(tid: int) -> str:
    """fabric manager / IMEX log prefix: ``[Dec 19 2024 22:08:53] [INFO] [tid 1570]``."""
    return time.strftime("[%b %d %Y %H:%M:%S]") + f" [INFO] [tid {tid}]"


def init_stamp() -> str:
    """``12/19/2024 22:08:53.808`` as in "Fabric Manager Log initializing at:"."""
    now = time.time()
    tm = time.localtime(now)
    return (f"{tm.tm_mon}/{tm.tm_mday}/{tm.tm_year} "
            f"{time.strftime('%H:%M:%S', tm)}.{int(now * 1000) % 1000:03d}")


def read_cfg(path: str) -> dict[str, str]:
    """KEY=VALUE config (fabricmanager.cfg, IMEX config.cfg); first occurrence wins."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for raw in fh:
            line = raw.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), value.strip())
    return out


def options(argv: list[str], names: dict[str, str],
             flags: frozenset[str] = frozenset()) -> dict[str, str] | None:
    """``-x VALUE`` / ``--long VALUE`` / ``--long=VALUE`` options; None on an unknown one."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in flags:
            out[arg] = "1"
            i += 1
            continue
        key, eq, value = arg.partition("=")
        if eq and key in names:
            out[names[key]] = value
            i += 1
        elif arg in names and i + 1 < len(argv):
            out[names[arg]] = argv[i + 1]
            i += 2
        else:
            return None
    return out


class Daemon:
    """The life of a fake daemon: SIGTERM handling (or ignoring), a crash timer, a loop.

    The signal handlers only set a flag (no lock, no threading primitive: a handler runs
    between two bytecodes of the main thread, which may hold that very lock, e.g. inside
    ``threading.Event.wait``, and would deadlock); the signal's byte on a self-pipe
    (``signal.set_wakeup_fd``) wakes the loop's ``select`` at once, and the loop also checks
    the flag every 50 ms.
    """

    def __init__(self, root: str, prog: str) -> None:
        import signal

        self.root = root
        self.prog = prog
        self.faults = faults(root, prog)
        self.started = time.monotonic()
        self.stopping = False
        self.crash_asked = False
        self._wake_r, wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        if self.faults.get("ignore_sigterm"):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        else:
            signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        if self.faults.get("crash_on_sigusr1"):
            signal.signal(signal.SIGUSR1, self._on_crash)

    def _on_stop(self, signum: int, frame: Any) -> None:
        self.stopping = True

    def _on_crash(self, signum: int, frame: Any) -> None:
        self.crash_asked = True

    def crash_due(self) -> bool:
        after = self.faults.get("crash_after_s")
        return self.crash_asked or (
            after is not None and time.monotonic() - self.started >= float(after))

    def crash(self) -> int:
        when = "on SIGUSR1" if self.crash_asked else \
            f"after {self.faults.get('crash_after_s')} s"
        say(f"[fake] {self.prog}: simulated crash {when}")
        return int(self.faults.get("exit_code", 1))

    def wait(self, seconds: float, fds: list[Any] | None = None,
             on_ready: Callable[[Any], None] | None = None) -> bool:
        """Sleep up to ``seconds``, serving ``fds``; False when stopping or crashing."""
        import select

        deadline = time.monotonic() + seconds
        while not self.stopping and not self.crash_due():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            try:
                ready, _, _ = select.select([self._wake_r, *(fds or [])], [], [],
                                            min(left, 0.05))
                for f in ready:
                    if f == self._wake_r:
                        try:
                            os.read(self._wake_r, 512)
                        except OSError:
                            pass
                    elif on_ready is not None:
                        on_ready(f)
            except (OSError, ValueError):  # InterruptedError is an OSError
                pass
        return False

    def shutdown_delay(self) -> None:
        time.sleep(float(self.faults.get("stop_delay_s", 0)))


def daemonize(lifetime_s: float) -> bool:
    """DAEMONIZE=1: fork; the parent returns True (and exits 0, as a forking daemon's launcher
    does); the child detaches and lives at most ``lifetime_s`` (a fake's limit)."""
    import signal

    if os.fork() > 0:
        return True
    os.setsid()
    signal.signal(signal.SIGALRM, lambda *_: os._exit(0))
    signal.alarm(max(1, int(lifetime_s)))
    return False
