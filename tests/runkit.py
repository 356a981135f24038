"""Support for the ``nvfabric run`` tests: simulated nodes with their fake daemons, and
``nvfabric run`` as a real process whose log lines are collected as they come.

The waits below are bounds against a hung test, not speed assertions: they are generous and a
test fails only when the awaited line never comes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from nvfabric.simulate import build, parse, profile_spec
from nvfabric.simulate.fakes import calls, install, set_faults
from tests import forkserver

BOUND_S = 30.0
T = TypeVar("T")
#: The RFC 3339 UTC timestamp nvfabric puts before each log line (nvfabric.effects.log).
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")
PYTHON_M_NVFABRIC = (sys.executable, "-m", "nvfabric")


def sim(tmp_path: Path, profile: str | dict[str, Any], faults: dict[str, Any] | None = None,
        name: str = "node") -> Path:
    """A simulated node (profile name or node spec) with its fakes installed."""
    root = tmp_path / name
    build(profile_spec(profile) if isinstance(profile, str) else parse(profile), str(root))
    install(str(root))
    if faults:
        set_faults(str(root), faults)
    return root


def events(root: Path, prog: str | None = None, event: str | None = None) -> list[dict[str, Any]]:
    """The fakes' recorded events, filtered."""
    return [c for c in calls(str(root))
            if (prog is None or c["prog"] == prog) and (event is None or c["event"] == event)]


def crash(root: Path, prog: str) -> int:
    """Make the running fake ``prog`` of the node crash now (its fault ``crash_on_sigusr1``:
    exit with its ``exit_code``), at the event the test waited for rather than after a time a
    loaded machine may overrun; the pid signalled (the last one started)."""
    pid = int(events(root, prog, "exec")[-1]["pid"])
    os.kill(pid, signal.SIGUSR1)
    return pid


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop_pids(find: Callable[[], list[int]], bound_s: float = 15) -> None:
    """Stop, by pid, the processes ``find()`` names (a test's own leftovers, found by a path
    only that test uses): SIGTERM, then SIGKILL to those still alive after ``bound_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = find()
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + bound_s
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if alive(p)]
            time.sleep(0.05)
        if not pids:
            return


def _tail(text: str | bytes | None, n: int = 4000) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return text if len(text) <= n else "..." + text[-n:]


class Done(subprocess.CompletedProcess[Any]):
    """A finished child (:func:`run`): its repr, which an assertion on it prints, ends with
    the last of its stderr and stdout."""

    def __repr__(self) -> str:
        argv = self.args if isinstance(self.args, (list, tuple)) else [self.args]
        return (f"<{' '.join(map(str, argv))[:300]} exited {self.returncode}; stderr:\n"
                f"{_tail(self.stderr)}\nstdout:\n{_tail(self.stdout, 2000)}>")

    def check(self, *codes: int) -> Done:
        """Self, when the exit code is one of ``codes`` (default 0); else the test fails
        naming the command, its exit code, stderr and stdout."""
        if self.returncode not in (codes or (0,)):
            raise AssertionError(f"expected exit {' or '.join(map(str, codes or (0,)))}: "
                                 f"{self!r}")
        return self


def run(argv: Sequence[str | os.PathLike[str]], *, timeout: float = 120, check: bool = False,
        text: bool = True, **kw: Any) -> Done:
    """``subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)`` for a
    test: a child still running after ``timeout`` (a hang guard, not a speed assertion) is
    killed and the test fails with what it wrote so far; ``check=True`` fails the test
    unless it exits 0. Either way the failure shows the child's stderr."""
    if "stdout" not in kw and "stderr" not in kw:
        kw["capture_output"] = True
    args = [os.fspath(a) for a in argv]
    try:
        proc = subprocess.run(args, timeout=timeout, text=text, check=False, **kw)
    except subprocess.TimeoutExpired as err:
        raise AssertionError(f"{' '.join(args)[:300]} still running after {timeout} s "
                             f"(killed); stderr so far:\n{_tail(err.stderr)}\nstdout so far:"
                             f"\n{_tail(err.stdout, 2000)}") from None
    done = Done(proc.args, proc.returncode, proc.stdout, proc.stderr)
    return done.check() if check else done


class Child:
    """A child process for a test (``subprocess.Popen(argv, stdout=PIPE, stderr=PIPE,
    text=True, **kw)``, or ``proc`` already started with both pipes) whose stderr lines and
    stdout are collected by threads as they come (``merge_output``: both as one stream of
    lines, ``stderr=STDOUT``): :meth:`wait_line` waits for an event (a
    line) with a generous bound, :meth:`wait` for the exit; a failure of either shows what the
    child wrote. :meth:`close` kills it if it still runs."""

    def __init__(self, argv: Sequence[str | os.PathLike[str]] | None = None, *,
                 proc: Any = None, merge_output: bool = False, **kw: Any) -> None:
        if proc is None:
            assert argv is not None
            kw.setdefault("stdin", subprocess.DEVNULL)
            proc = subprocess.Popen(
                [os.fspath(a) for a in argv], stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if merge_output else subprocess.PIPE, text=True, **kw)
        self.proc = proc
        self.lines: list[str] = []  # stderr lines (for nvfabric run: without the timestamp)
        self.raw_lines: list[str] = []  # as written
        self.stdout = ""
        self._cond = threading.Condition()
        self._threads = [threading.Thread(target=self._read_err, daemon=True),
                         threading.Thread(target=self._read_out, daemon=True)]
        for t in self._threads:
            t.start()

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def _clean(self, raw: str) -> str:
        return raw

    def _read_err(self) -> None:
        stream = self.proc.stderr if self.proc.stderr is not None else self.proc.stdout
        assert stream is not None
        for line in stream:
            with self._cond:
                raw = line.rstrip("\n")
                self.raw_lines.append(raw)
                self.lines.append(self._clean(raw))
                self._cond.notify_all()

    def _read_out(self) -> None:
        if self.proc.stderr is None:
            return  # merge_output: stdout's lines are read as stderr's
        assert self.proc.stdout is not None
        self.stdout = self.proc.stdout.read()

    @property
    def log(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def _what(self) -> str:
        return " ".join(map(str, getattr(self.proc, "args", ["the child"])))[:300]

    def wait_line(self, pattern: str, bound: float = BOUND_S) -> str:
        """The first stderr line matching ``pattern``; fails the test if none comes in time
        (or the child ended without it)."""
        return self.wait_count(pattern, 1, bound)[0]

    def wait_count(self, pattern: str, count: int, bound: float = BOUND_S) -> list[str]:
        """Wait until ``count`` stderr lines match ``pattern``; fails the test otherwise."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + bound
        with self._cond:
            while True:
                found = [line for line in self.lines if rx.search(line)]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._threads[0].is_alive()):
                    what = f"a line matching {pattern!r}" if count == 1 else \
                        f"{count} lines matching {pattern!r}"
                    raise AssertionError(f"no {what} from {self._what()}; stderr:\n"
                                         + "\n".join(self.lines))
                self._cond.wait(min(left, 0.1))

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def wait(self, bound: float = BOUND_S) -> int:
        """Exit code, once the process ended (killed and failing the test after ``bound``)."""
        try:
            code = self.proc.wait(bound)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self._what()} did not exit within {bound} s; stderr:\n"
                                 + self.log) from None
        for t in self._threads:
            t.join(5)
        return int(code)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class Run(Child):
    """``python -m nvfabric run --root ROOT ARGS`` as a real process (or wrapped by
    ``prefix``, e.g. ``unshare -fp``); stderr and stdout are collected by threads.
    ``command`` replaces ``python -m nvfabric`` (the single-file binary: ``("dist/nvfabric",)``).
    Without either, the process is forked from :mod:`tests.forkserver`."""

    def __init__(self, root: Path, *args: str, env: dict[str, str] | None = None,
                 prefix: tuple[str, ...] = (),
                 command: tuple[str, ...] = PYTHON_M_NVFABRIC) -> None:
        full_env = dict(os.environ)
        full_env.pop("NVFABRIC_DEBUG", None)
        full_env.pop("NOTIFY_SOCKET", None)
        full_env.update(env or {})
        self.root = root
        if not prefix and command == PYTHON_M_NVFABRIC:
            proc = forkserver.popen(["run", "--root", str(root), *args], env=full_env)
        else:
            proc = subprocess.Popen(
                [*prefix, *command, "run", "--root", str(root), *args],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=full_env, text=True)
        super().__init__(proc=proc)

    def _clean(self, raw: str) -> str:
        return TIMESTAMP.sub("", raw, count=1)

    def _what(self) -> str:
        return "nvfabric run"

    def result(self) -> dict[str, Any]:
        """The JSON object printed on stdout (with --json)."""
        data = json.loads(self.stdout)
        assert isinstance(data, dict)
        return data


#: Where the kernel puts a task that waits in a pipe's read (by kernel version: pipe_wait
#: before 5.x, pipe_read, anon_pipe_read on 6.x) or in the open of a FIFO for its writer
#: (wait_for_partner): /proc/PID/task/TID/wchan.
PIPE_WAITS = ("anon_pipe_read", "pipe_read", "pipe_wait", "wait_for_partner")


def blocked_reading(pid: int, tid: int | None = None) -> bool:
    """Thread ``tid`` (default: the main thread) of ``pid`` sleeps in the kernel reading a
    pipe or opening a FIFO: the event a test that signals a blocked reader waits for."""
    try:
        with open(f"/proc/{pid}/task/{tid or pid}/wchan", encoding="ascii") as fh:
            return fh.read().strip() in PIPE_WAITS
    except OSError:
        return False


def until(predicate: Callable[[], bool], what: str, bound: float = BOUND_S) -> None:
    """Poll ``predicate`` every 10 ms until it holds; fails the test after ``bound`` seconds."""
    deadline = time.monotonic() + bound
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not true after {bound} s: {what}")
        time.sleep(0.01)


def poll(fetch: Callable[[], T], done: Callable[[T], bool], what: str,
         bound: float = BOUND_S, every: float = 0.05) -> T:
    """``fetch()`` every ``every`` seconds until ``done(value)``; that value. Fails the test
    after ``bound`` seconds naming ``what`` and the last value: a bound on an event (the
    value arriving), never a count of tries that assumes how long each takes."""
    deadline = time.monotonic() + bound
    while True:
        value = fetch()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"still not {what} after {bound} s; last: {value!r}"[:4000])
        time.sleep(every)


def codes(result: dict[str, Any]) -> list[str]:
    return [f["code"] for f in result.get("findings", [])]


def finding(result: dict[str, Any], code: str) -> dict[str, Any]:
    for f in result.get("findings", []):
        if f["code"] == code:
            return dict(f)
    raise AssertionError(f"no {code} finding in {result}")
