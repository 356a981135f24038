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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nvfabric.simulate import build, parse, profile_spec
from nvfabric.simulate.fakes import calls, install, set_faults
from tests import forkserver

BOUND_S = 30.0
#: The RFC 3339 UTC timestamp nvfabric puts before each log line (nvfabric.observe.logs).
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


class Run:
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
        self.proc: Any
        if not prefix and command == PYTHON_M_NVFABRIC:
            self.proc = forkserver.popen(["run", "--root", str(root), *args], env=full_env)
        else:
            self.proc = subprocess.Popen(
                [*prefix, *command, "run", "--root", str(root), *args],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=full_env, text=True)
        self.lines: list[str] = []  # the log lines without their leading RFC 3339 timestamp
        self.raw_lines: list[str] = []  # as written
        self.stdout = ""
        self._cond = threading.Condition()
        self._threads = [threading.Thread(target=self._read_err, daemon=True),
                         threading.Thread(target=self._read_out, daemon=True)]
        for t in self._threads:
            t.start()

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._cond:
                raw = line.rstrip("\n")
                self.raw_lines.append(raw)
                self.lines.append(TIMESTAMP.sub("", raw, count=1))
                self._cond.notify_all()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        self.stdout = self.proc.stdout.read()

    @property
    def log(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def wait_line(self, pattern: str, bound: float = BOUND_S) -> str:
        """The first log line matching ``pattern``; fails the test if none comes in time."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + bound
        with self._cond:
            while True:
                for line in self.lines:
                    if rx.search(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._threads[0].is_alive()):
                    raise AssertionError(f"no line matching {pattern!r}; log:\n" + "\n".join(
                        self.lines))
                self._cond.wait(min(left, 0.1))

    def wait_count(self, pattern: str, count: int, bound: float = BOUND_S) -> list[str]:
        """Wait until ``count`` log lines match ``pattern``; fails the test otherwise."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + bound
        with self._cond:
            while True:
                found = [line for line in self.lines if rx.search(line)]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._threads[0].is_alive()):
                    raise AssertionError(f"fewer than {count} lines matching {pattern!r}; log:\n"
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
            raise AssertionError("nvfabric run did not exit; log:\n" + self.log) from None
        for t in self._threads:
            t.join(5)
        return code

    def result(self) -> dict[str, Any]:
        """The JSON object printed on stdout (with --json)."""
        data = json.loads(self.stdout)
        assert isinstance(data, dict)
        return data

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def until(predicate: Callable[[], bool], what: str, bound: float = BOUND_S) -> None:
    """Poll ``predicate`` every 10 ms until it holds; fails the test after ``bound`` seconds."""
    deadline = time.monotonic() + bound
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not true after {bound} s: {what}")
        time.sleep(0.01)


def codes(result: dict[str, Any]) -> list[str]:
    return [f["code"] for f in result.get("findings", [])]


def finding(result: dict[str, Any], code: str) -> dict[str, Any]:
    for f in result.get("findings", []):
        if f["code"] == code:
            return dict(f)
    raise AssertionError(f"no {code} finding in {result}")
