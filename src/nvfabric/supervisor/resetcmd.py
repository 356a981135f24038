"""The operator's GPU reset command (``--gpu-reset-command``, RUN.md R04), run in its own
process group with a bound while the stop signals are still watched."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from nvfabric.effects.log import Log
from nvfabric.effects.stop import SIGHUP_IGNORED
from nvfabric.supervisor.machine import STOP_SIGNALS
from nvfabric.supervisor.timers import Clock

if TYPE_CHECKING:
    import subprocess

#: subprocess and selectors are imported when a reset runs: the lean supervisor holds neither
#: otherwise (its idle resident memory).


def run_reset(argv: Sequence[str], timeout_s: float, tick: Callable[[], float], sig_r: int,
              log: Log, clock: Clock) -> tuple[int | None, bytes, str | None]:
    """Run the reset command in its own process group, bounded by ``timeout_s``, while
    watching the stop signals: (exit code, output, None) when it ended; (None, output, None)
    when it timed out (its group SIGKILLed); (None, output, signal name) when SIGTERM/SIGINT
    came (its group SIGTERMed, then SIGKILLed after the grace). OSError when it cannot be
    started. ``sig_r``: the loop's signal wakeup pipe, read here meanwhile; ``tick()`` pings
    the watchdog when due and says how soon it is due again."""
    import subprocess  # only a GPU reset runs it: the lean supervisor never holds it otherwise

    child = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
    assert child.stdout is not None
    out = _Output(child.stdout.fileno())
    stopped_by = _wait(child, out, sig_r, clock() + timeout_s, tick, log, clock)
    if child.poll() is None:
        _stop(child, stopped_by)
        out.drain()
        child.stdout.close()
        return None, bytes(out.data), stopped_by
    out.drain()
    child.stdout.close()
    return child.returncode, bytes(out.data), stopped_by


class _Output:
    """The reset command's output, kept up to 1 MiB."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.data = bytearray()
        os.set_blocking(fd, False)

    def drain(self) -> bool:
        """Read what is there; False at end of file."""
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            self.data.extend(chunk[: max(0, (1 << 20) - len(self.data))])


def _wait(child: subprocess.Popen[bytes], out: _Output, sig_r: int, deadline: float,
          tick: Callable[[], float], log: Log, clock: Clock) -> str | None:
    """Until the command ends, the deadline passes or a stop signal comes (its name)."""
    import selectors

    stopped_by: str | None = None
    sel = selectors.DefaultSelector()
    sel.register(out.fd, selectors.EVENT_READ, "out")
    sel.register(sig_r, selectors.EVENT_READ, "sig")
    try:
        while child.poll() is None and stopped_by is None:
            until_ping = tick()
            left = deadline - clock()
            if left <= 0:
                break
            for key, _ in sel.select(min(left, 0.5, until_ping)):
                if key.data == "out":
                    if not out.drain():
                        sel.unregister(out.fd)
                    continue
                try:
                    data = os.read(sig_r, 512)
                except BlockingIOError:
                    continue
                for signum in data:
                    if signum in STOP_SIGNALS:
                        stopped_by = signal.Signals(signum).name
                    elif signum == signal.SIGHUP:
                        log.say(SIGHUP_IGNORED)
    finally:
        sel.close()
    return stopped_by


def _stop(child: subprocess.Popen[bytes], stopped_by: str | None) -> None:
    """The command still runs: SIGTERM to its group after a stop signal (SIGKILL 10 s
    later), SIGKILL at once after its timeout."""
    import subprocess

    sig = signal.SIGTERM if stopped_by else signal.SIGKILL
    with contextlib.suppress(OSError):
        os.killpg(child.pid, sig)
    try:
        child.wait(10.0 if stopped_by else 5.0)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
