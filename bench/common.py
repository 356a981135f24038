"""Helpers shared by the benchmarks: timing of whole processes, peak RSS, medians."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO

PY = sys.executable


def median_ms(fn: Callable[[], object], runs: int) -> float:
    """Median wall time of ``fn()`` in milliseconds over ``runs`` calls."""
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def process_ms(argv: Sequence[str], runs: int = 20, env: dict[str, str] | None = None) -> float:
    """Median wall time of a whole process (stdout discarded), in milliseconds."""
    def once() -> None:
        subprocess.run(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False, env=env)
    once()  # warm the page cache and .pyc files
    return median_ms(once, runs)


def interleaved_ms(argvs: Sequence[Sequence[str]], runs: int = 20) -> list[list[float]]:
    """Wall times (ms) of whole processes, one run of each argv in turn per round (so that a
    busy spell of a shared machine weighs on all of them alike), after one warm-up round."""
    samples: list[list[float]] = [[] for _ in argvs]
    for round_ in range(runs + 1):
        for argv, into in zip(argvs, samples, strict=True):
            t0 = time.perf_counter()
            subprocess.run(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=False)
            if round_:
                into.append((time.perf_counter() - t0) * 1000)
    return samples


#: Issue 11: ``plan --json`` and ``status --from-nvidia-smi FILE --json``, whole process, at
#: most this many times ``python3 -c pass``.
STARTUP_TARGET_X = 4.0


def startup_ratio(cmd: list[float], base: list[float]) -> str:
    """``median ms (min) = Nx python -c pass (min/min Mx); target``: for start-up figures."""
    ratio = statistics.median(cmd) / statistics.median(base)
    return (f"{statistics.median(cmd):.1f} ms (min {min(cmd):.1f}) = {ratio:.2f}x python -c "
            f"pass (min/min {min(cmd) / min(base):.2f}x); target <= {STARTUP_TARGET_X:g}x: "
            f"{'met' if ratio <= STARTUP_TARGET_X else 'OVER'}")


def peak_rss_mb(argv: Sequence[str], env: dict[str, str] | None = None) -> float:
    """Peak resident set size of one run of ``argv`` (its own process tree), in MiB."""
    code = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run([PY, "-c", code, *argv], capture_output=True, text=True, check=True,
                         env=env)
    return int(out.stdout.strip()) / 1024


def self_rss_mb() -> float:
    """Peak RSS of this process so far, MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def line(label: str, value: str) -> None:
    """Print one figure as ``label: value``."""
    print(f"{label:<58} {value}", flush=True)


def cpu_count() -> int:
    return os.cpu_count() or 1


class StderrLines:
    """The lines a process writes on stderr, each with the wall-clock time it arrived
    (``time.time()``, to compare with the fakes' records), read by a daemon thread.
    :meth:`until` is the arrival time of the first line holding ``needle`` (a line already
    seen counts), within ``bound_s`` seconds; RuntimeError when the process ends first."""

    def __init__(self, stream: IO[str], bound_s: float) -> None:
        import queue
        import threading

        self.bound_s = bound_s
        self.lines: queue.Queue[tuple[float, str] | None] = queue.Queue()
        self.seen: list[tuple[float, str]] = []
        self._stream = stream
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for raw in self._stream:
            self.lines.put((time.time(), raw.rstrip("\n")))
        self.lines.put(None)

    def until(self, needle: str) -> float:
        for t, text in self.seen:
            if needle in text:
                return t
        deadline = time.monotonic() + self.bound_s
        while True:
            item = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if item is None:
                raise RuntimeError(f"nvfabric run ended before {needle!r}")
            self.seen.append(item)
            if needle in item[1]:
                return item[0]
