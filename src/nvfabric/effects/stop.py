"""Stop signals as events: SIGTERM and SIGINT (and an ignored SIGHUP) recorded when they come
and acted on where the command waits, never raised from the signal handler into whatever code
happens to run.

Why not raise from the handler: an exception raised at an arbitrary bytecode can land inside
C code that clears errors. ``nvfabric wait`` lost its SIGTERM that way under load: the
handler's ``SystemExit`` came while ``xml.etree.ElementTree`` imported its C accelerator,
which swallowed it, and ``wait`` ran on for the probe's whole 15 s and the next one.

So the handler only records the first stop signal and writes one byte to a pipe
(:func:`fd`); the pipe stays readable from then on, so every wait that includes it (the
probe door :func:`nvfabric.effects.program.run`, :func:`wait`, :func:`sleep`) ends at once,
in any thread, and raises :class:`Stopped` there, at a point where the caller's
``finally`` and ``except`` clauses are ordinary Python. The stop signals are delivered to
the main thread (Linux prefers the thread group leader; the probe threads of
:mod:`nvfabric.facts.parallel` block them), whose handler runs even while it waits on a
thread (a lock acquire is interrupted by the signal).

A command that hands the signals on to another owner (the supervisor's loop, the lean
process after ``execv``, a ``sigwait``) calls :func:`handover` first: the signals are blocked
(one that comes now stays pending for the next owner) and a stop that already came is
raised as :class:`Stopped`.

One wait is a system call no pipe can join: a blocking ``read`` or ``open`` of stdin, a
FIFO or a device. A handler that only records lets Python restart such a call (PEP 475), so
a command blocked reading a pipe whose writer never ends ignored SIGTERM. Around those calls
alone (:func:`reading`) the handler raises :class:`Stopped` itself: the interrupted call
then fails with it (PEP 475: "unless the signal handler raises an exception"), in plain
Python code that only reads.

Every command ends a stop it does not own the same way (:meth:`Stopped.finding`, by the
command line's error door): one line, or one ``{"error": ...}`` object under ``--json``,
naming the signal and what it interrupted, exit ``128 + signal`` (130 for SIGINT, 143 for
SIGTERM: the shell's figures, never 1, which means "the checked thing is bad").
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
from collections.abc import Callable, Iterator, Sequence

from nvfabric.model.findings import Finding

#: The signals that stop a command.
STOP = (signal.SIGTERM, signal.SIGINT)
#: The one line logged for a SIGHUP to ``nvfabric run`` (ignored: nvfabric has no reload; a
#: terminal closing or a ``systemctl reload`` must not stop the fabric).
SIGHUP_IGNORED = "received SIGHUP: ignored (no reload; restart nvfabric run to apply changes)"


class Stopped(BaseException):
    """A stop signal came (``signum``; 0 when the handler had not run yet where it was seen);
    ``during``: what the command was blocked reading then (:func:`reading`), "" elsewhere.
    A BaseException, as KeyboardInterrupt: a reader's ``except Exception`` does not eat it."""

    def __init__(self, signum: int, during: str = "") -> None:
        super().__init__(signum)
        self.signum = signum
        self.during = during

    @property
    def exit_code(self) -> int:
        """``128 + signal``: 130 for SIGINT, 143 for SIGTERM (SIGTERM when unknown)."""
        return 128 + (self.signum or signal.SIGTERM)

    def finding(self) -> Finding:
        """``interrupted``: the one line (or JSON object) of a command a stop signal ended."""
        name = signal.Signals(self.signum or signal.SIGTERM).name
        where = f" while reading {self.during}" if self.during else " before it finished"
        return Finding(
            "interrupted", "error", f"stopped by {name}{where}; nothing was changed",
            "run the command again; a reader of stdin or a FIFO waits until its writer closes "
            "it (end of input)",
            {"signal": name, **({"reading": self.during} if self.during else {})})


class _Watch:
    """What the handlers share: the pipe, the first stop signal, the ignored ones not yet
    said."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.signum = 0
        self.ignored: list[int] = []
        self.previous: dict[int, object] = {}
        self.reading = ""  # what a blocking read now waits on (:func:`reading`)

    def on_stop(self, signum: int, frame: object) -> None:
        if not self.signum:
            self.signum = signum
            with contextlib.suppress(OSError):
                os.write(self.w, b"s")
        if self.reading:
            raise Stopped(signum, self.reading)

    def on_ignored(self, signum: int, frame: object) -> None:
        self.ignored.append(signum)


_watch: _Watch | None = None


def watch(ignored: Sequence[int] = ()) -> bool:
    """From now on the stop signals are recorded (see the module docstring), and each of
    ``ignored`` (``run``'s SIGHUP) is noted for :func:`ignored` instead of acting. Main thread
    only: False (nothing done) elsewhere; True also when already watching."""
    global _watch
    if threading.current_thread() is not threading.main_thread():
        return False
    if _watch is None:
        w = _Watch()
        for sig in STOP:
            w.previous[sig] = signal.signal(sig, w.on_stop)
        _watch = w
    for extra in ignored:
        if extra not in _watch.previous:
            _watch.previous[extra] = signal.signal(extra, _watch.on_ignored)
    return True


def unwatch() -> None:
    """Put back the handlers :func:`watch` replaced (a stop that came is forgotten)."""
    global _watch
    w, _watch = _watch, None
    if w is None:
        return
    for sig, old in w.previous.items():
        signal.signal(sig, old)  # type: ignore[arg-type]
    for fd in (w.r, w.w):
        with contextlib.suppress(OSError):
            os.close(fd)


@contextlib.contextmanager
def watching(ignored: Sequence[int] = ()) -> Iterator[None]:
    """:func:`watch` while inside, :func:`unwatch` on leaving (when this block started it)."""
    mine = _watch is None and watch(ignored)
    try:
        yield
    finally:
        if mine:
            unwatch()


@contextlib.contextmanager
def reading(what: str) -> Iterator[None]:
    """Around one blocking read or open of ``what`` (``stdin``, a FIFO's path): a stop signal
    raises :class:`Stopped` from the handler into the call (see the module docstring), one
    that came before at once. Watches the stop signals from the first such read on, for the
    rest of the command (a signal after the last read is recorded for the command's next
    wait; a command that only reads then decides ends soon anyway). Only the read itself may
    sit inside: whatever is inside can be left at any bytecode. Main thread only; elsewhere
    (the signals are not delivered there) nothing changes."""
    if not watch() or _watch is None:
        yield
        return
    w = _watch
    before = w.reading
    try:
        w.reading = what
        if w.signum:
            raise Stopped(w.signum, what)
        yield
    finally:
        w.reading = before


def fd() -> int | None:
    """The descriptor that is readable once a stop signal came (None: not watching)."""
    return _watch.r if _watch is not None else None


def received() -> int:
    """The stop signal that came (its number), 0 when none did or nothing watches."""
    return _watch.signum if _watch is not None else 0


def ignored() -> list[str]:
    """The names of the ignored signals that came since the last call (to be logged)."""
    if _watch is None or not _watch.ignored:
        return []
    got, _watch.ignored = _watch.ignored, []
    return [signal.Signals(s).name for s in got]


def check() -> None:
    """Raise :class:`Stopped` when a stop signal came."""
    if received():
        raise Stopped(received())


def wait(fds: Sequence[int], timeout_s: float | None) -> list[int]:
    """Those of ``fds`` readable within ``timeout_s`` seconds (None: no limit; [] when the time
    is up); :class:`Stopped` as soon as a stop signal comes (before, too)."""
    stop = fd()
    poller = select.poll()  # not select(): a descriptor may be past FD_SETSIZE
    for f in fds:
        poller.register(f, select.POLLIN)
    if stop is not None:
        poller.register(stop, select.POLLIN)
    ms = None if timeout_s is None else max(0, int(-(-timeout_s * 1e3 // 1)))
    ready = [f for f, _ in poller.poll(ms)]
    if stop is not None and stop in ready:
        raise Stopped(received())
    return ready


def sleep(seconds: float) -> None:
    """Sleep ``seconds``; :class:`Stopped` as soon as a stop signal comes."""
    wait((), max(0.0, seconds))


def block_in_thread() -> None:
    """In a helper thread: the stop signals are not delivered to it (they go to the main
    thread, whose handler records them; see the module docstring)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, (*STOP, signal.SIGHUP))


def handover() -> None:
    """Before the signals get another owner (a loop's handlers, the lean process after
    ``execv``, ``sigwait``): :class:`Stopped` when a stop signal already came (the stop is this
    process's to finish); else the stop signals and SIGHUP are blocked in this thread from now
    on, so one that comes stays pending for that owner. A signal that another thread took
    meanwhile is recorded all the same: the new owner asks :func:`received` once its handlers
    are in place (:meth:`nvfabric.supervisor.loop.Loop.open`)."""
    check()
    signal.pthread_sigmask(signal.SIG_BLOCK, (*STOP, signal.SIGHUP))


def wait_for_stop(message: str, say: Callable[[str], None]) -> str:
    """Say ``message`` and block until SIGTERM or SIGINT (its name returned); a SIGHUP on the
    way is said (:data:`SIGHUP_IGNORED`) and ignored. ``say``: the log's line writer."""
    signals = {*STOP, signal.SIGHUP}
    try:
        handover()  # the command's recorded stop, if one came before
    except Stopped as got:
        return signal.Signals(got.signum or signal.SIGTERM).name
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    say(message)
    if received():  # taken by another thread after the hand-over
        return signal.Signals(received()).name
    while True:
        signum = signal.sigwait(signals)
        if signum != signal.SIGHUP:
            return signal.Signals(signum).name
        say(SIGHUP_IGNORED)
