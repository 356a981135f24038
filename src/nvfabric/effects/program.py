"""The one door for running a program whose output nvfabric reads: the node's ``nvidia-smi``,
``nv-fabricmanager --version``, ``nvidia-imex-ctl``, ``systemctl``, ``dpkg``.

Every call is bounded three ways, as every file reader is (docs/readers.md,
"Sizes"):

- **bytes**: stdout and stderr each at most ``stdout_cap`` / ``stderr_cap`` bytes kept. A
  program that changes nothing (a probe) is killed at the cap: its answer is not an answer
  any more (``yes "Fabric Manager version is : 550.90.07"`` as ``--fm-bin`` once took 70 s and
  18.6 GB). A program that changes the node (``dpkg -i``, ``systemctl enable``) is never
  killed for talking (half an install is worse than a long log): ``keep="tail"`` keeps the
  last ``cap`` bytes of each stream and reads on;
- **time**: ``timeout_s`` seconds, then the program's whole process group gets SIGKILL, so a
  grandchild holding the pipes cannot keep the caller waiting;
- **stop signals**: a SIGTERM or SIGINT of nvfabric (:mod:`nvfabric.effects.stop`) ends the
  wait at once, the group is killed, and :class:`~nvfabric.effects.stop.Stopped` is raised.

The program runs in its own session (no terminal signal reaches it) with PR_SET_PDEATHSIG =
SIGKILL (it dies with the thread that started it, also when nvfabric is killed with SIGKILL),
stdin ``/dev/null``, argv only (never a shell).

Under a ``--root`` other than ``/`` the program is the tree's file: a path joined under a root
(:func:`nvfabric.model.hostpath.under`) that is a link out of it is not run
(:func:`nvfabric.model.hostpath.program`, the rule ``run`` applies to the daemons it starts).

Errors: OSError when the program cannot be started; PathEscape for a link out of the root;
Stopped. A cap is not an error: the :class:`Ran` says which one (:attr:`Ran.limit`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from nvfabric.effects import stop
from nvfabric.effects.process import die_with_parent_preexec
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import program
from nvfabric.model.strict import MiB

#: stderr kept by default: a program's complaint is a few lines; 1 MiB is far past any.
STDERR_CAP = MiB

Keep = Literal["kill", "tail"]


@dataclass(frozen=True)
class Limit:
    """The cap a program met: ``what`` ``time`` (``value`` seconds), ``stdout`` or ``stderr``
    (``value`` bytes)."""

    what: Literal["time", "stdout", "stderr"]
    value: float

    def words(self) -> str:
        if self.what == "time":
            return f"did not finish within {self.value:g} s"
        return f"printed more than {_size(int(self.value))} on {self.what}"


@dataclass(frozen=True)
class Ran:
    """One call: ``rc`` its exit status, None when it was killed at a cap (:attr:`limit`);
    with ``keep="tail"`` a stream over its cap has ``limit`` set and ``rc`` its real status.
    ``stdout``/``stderr``: what was kept of each (at most the cap)."""

    argv: tuple[str, ...]
    rc: int | None
    stdout: bytes
    stderr: bytes
    limit: Limit | None = None

    @property
    def timed_out(self) -> bool:
        return self.rc is None and self.limit is not None and self.limit.what == "time"

    def limit_text(self) -> str:
        """``PROGRAM ARGS printed more than 16 MiB on stdout (killed)``, or "" without a cap."""
        if self.limit is None:
            return ""
        killed = " (killed)" if self.rc is None else " (the rest was dropped)"
        return f"{' '.join(self.argv)} {self.limit.words()}{killed}"

    def finding(self, hint: str) -> Finding | None:
        """``probe_limit`` naming the program and the cap (None when it met none)."""
        if self.limit is None:
            return None
        return Finding("probe_limit", "error", self.limit_text(), hint,
                       {"program": self.argv[0], "argv": list(self.argv),
                        "limit": self.limit.what, "limit_value": self.limit.value})


def _size(n: int) -> str:
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB} MiB"
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} bytes"


def run(argv: Sequence[str], timeout_s: float, stdout_cap: int,
        stderr_cap: int = STDERR_CAP, keep: Keep = "kill",
        meanwhile: Callable[[], None] | None = None,
        on_start: Callable[[int], None] | None = None,
        env: dict[str, str] | None = None) -> Ran:
    """Run ``argv`` within the bounds of the module docstring. ``on_start(pid)`` and then
    ``meanwhile()`` are called once the program runs (``meanwhile``: work that does not need
    its answer, done while it is awaited); ``env``: the program's environment (default:
    nvfabric's)."""
    args = tuple(argv)
    program(args[0])
    proc = subprocess.Popen(  # noqa: S603 - argv list, no shell
        args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, preexec_fn=die_with_parent_preexec(signal.SIGKILL), env=env)
    try:
        if on_start is not None:
            on_start(proc.pid)
        if meanwhile is not None:
            meanwhile()
        return _collect(proc, args, timeout_s, (stdout_cap, stderr_cap), keep)
    finally:
        # leaving for any reason (Stopped, an exception in meanwhile): the program is in
        # its own session, so nothing else would end it
        if proc.poll() is None:
            _kill_group(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


class _Stream:
    """One output pipe, read without blocking, kept up to its cap (the tail, or the first
    ``cap`` bytes and a flag that there was more)."""

    def __init__(self, fd: int, name: Literal["stdout", "stderr"], cap: int,
                 keep: Keep) -> None:
        self.fd, self.name, self.cap, self.keep = fd, name, cap, keep
        self.data = bytearray()
        self.over = False
        self.open = True
        os.set_blocking(fd, False)

    def read(self) -> None:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            self.open = False
            return
        self.data += chunk
        if len(self.data) > self.cap:
            self.over = True
            if self.keep == "tail":
                del self.data[:len(self.data) - self.cap]


def _collect(proc: subprocess.Popen[bytes], argv: tuple[str, ...], timeout_s: float,
             caps: tuple[int, int], keep: Keep) -> Ran:
    assert proc.stdout is not None and proc.stderr is not None
    streams = {s.fd: s for s in (_Stream(proc.stdout.fileno(), "stdout", caps[0], keep),
                                 _Stream(proc.stderr.fileno(), "stderr", caps[1], keep))}
    deadline = _now() + timeout_s
    limit: Limit | None = None
    while any(s.open for s in streams.values()):
        left = deadline - _now()
        if left <= 0:
            limit = Limit("time", timeout_s)
            break
        for fd in stop.wait([f for f, s in streams.items() if s.open], left):
            streams[fd].read()
        over = [s for s in streams.values() if s.over]
        if over and keep == "kill":
            limit = Limit(over[0].name, over[0].cap)
            break
    rc: int | None = None
    if limit is None:
        rc = _reap(proc, deadline)
        if rc is None:
            limit = Limit("time", timeout_s)
    if rc is None:
        _kill_group(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
    elif limit is None:
        over = [s for s in streams.values() if s.over]
        if over:
            limit = Limit(over[0].name, over[0].cap)
    out, err = (bytes(s.data[:s.cap]) for s in streams.values())
    return Ran(argv, rc, out, err, limit)


def _reap(proc: subprocess.Popen[bytes], deadline: float) -> int | None:
    """The exit status once both pipes closed (a program that closed them and runs on is
    waited for until the deadline); None when it did not exit by then."""
    pause = 0.001
    while True:
        rc = proc.poll()
        if rc is not None:
            return rc
        left = deadline - _now()
        if left <= 0:
            return None
        stop.sleep(min(pause, left))
        pause = min(pause * 2, 0.05)


def _now() -> float:
    return time.monotonic()


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
