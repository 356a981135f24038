"""What the unit state machine asks of the world (:class:`Host`), and its record of one running
service (:class:`Proc`).

The state machine (:mod:`nvfabric.supervisor.machine`) decides; a host acts: the event loop's
(:mod:`nvfabric.supervisor.loop`) spawns, signals and watches real processes, a test's fake
records the calls and answers from a table. Times come from :meth:`Host.now`, the injected
clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from nvfabric.bringup.spec import ServiceSpec
from nvfabric.model.gpucheck import GpuCheck
from nvfabric.supervisor.policy import Classifier


@dataclass
class Proc:
    """One started service: its spec, pid, output descriptor (None once closed), start time
    (the host's clock), live diagnosis, last lines, the partial line not yet terminated,
    readiness, wait status once it exited, the socket directory watch while waiting for it,
    whether its success line was seen, and the poll of its socket's listening."""

    spec: ServiceSpec
    pid: int
    fd: int | None
    started: float
    classifier: Classifier | None
    last: deque[str]
    buf: bytearray = field(default_factory=bytearray)
    ready: bool = False
    status: int | None = None
    watch: object | None = None
    line_seen: bool = False
    #: seconds to the next look at the kernel's table while the socket file exists but is not
    #: listening yet (listen(2) makes no inotify event); None before the file was seen
    listen_poll: float | None = None


class Host(Protocol):
    """The effects a unit needs. Errors: :meth:`spawn` and :meth:`watch_dir` raise OSError
    (the unit reports it); the others do not raise unless said."""

    def now(self) -> float:
        """Seconds on a monotonic clock."""

    def pid(self) -> int:
        """This process's pid (the readiness file names it)."""

    def spawn(self, argv: Sequence[str], env: dict[str, str]) -> tuple[int, int]:
        """Start a daemon: (pid, its output's read end). OSError when it cannot run."""

    def kill(self, pid: int, sig: int) -> None:
        """Signal the process group of ``pid``."""

    def reap(self, pid: int) -> int | None:
        """The wait status of ``pid`` once it exited, else None."""

    def wait(self, pid: int) -> None:
        """Block until ``pid`` (killed) has exited, and collect it."""

    def watch_output(self, fd: int, on_readable: Callable[[], None]) -> None:
        """Call ``on_readable`` whenever ``fd`` has output."""

    def read(self, fd: int) -> bytes | None:
        """One block of output; None when nothing is there now, ``b""`` at its end."""

    def close_output(self, fd: int) -> None:
        """Stop watching ``fd`` and close it."""

    def watch_dir(self, directory: str, on_change: Callable[[], None]) -> object:
        """Call ``on_change`` when an entry of ``directory`` appears (inotify): a handle.
        OSError when the directory cannot be watched (then the unit polls)."""

    def drain_watch(self, handle: object) -> None:
        """Forget the events seen so far of a watch."""

    def unwatch(self, handle: object) -> None:
        """End a watch."""

    def is_socket(self, path: str) -> bool:
        """True when ``path`` is a socket."""

    def socket_listening(self, path: str) -> bool:
        """True when a process accepts connections on the socket at ``path`` (someone else's
        socket: asked by connecting)."""

    def socket_listens(self, path: str) -> bool | None:
        """True when the socket bound at ``path`` is listening, read without connecting (the
        kernel's table of Unix sockets); None when that cannot be read."""

    def unlink(self, path: str) -> None:
        """Remove ``path`` (OSError passes)."""

    def ensure_dir(self, path: str) -> bool:
        """Create ``path`` 0700 when missing (R06): True when created."""

    def executable(self, path: str) -> bool:
        """True when ``path`` is a regular file this process may execute."""

    def notify(self, message: str) -> bool:
        """An sd_notify(3) datagram to ``$NOTIFY_SOCKET``: True when sent."""

    def write_file(self, path: str, text: str) -> None:
        """Write ``text`` to ``path`` atomically (mode 0644, directory 0700). OSError."""

    def remove_file(self, path: str) -> None:
        """Remove ``path``; a missing file is no error (others pass as OSError)."""

    def read_small(self, path: str) -> str:
        """The first 64 characters of the text file at ``path``. OSError."""

    def request_probe(self) -> bool:
        """Ask for one readiness probe, answered later (the loop calls the unit's
        ``on_probe``); False when there is no probe."""

    def probe_now(self) -> GpuCheck | None:
        """One readiness probe, now (nothing else runs: R09); None when there is no probe.
        A probe that raises reads as an unreadable state."""

    def run_reset(self, argv: Sequence[str], timeout_s: float, tick: Callable[[], float]
                  ) -> tuple[int | None, bytes, str | None]:
        """Run the GPU reset command (:func:`nvfabric.supervisor.restart.gpu_reset`):
        (exit code | None when killed at its timeout, its output, the stop signal's name when
        one came). ``tick()`` is called while it runs and says how soon to call it again."""
