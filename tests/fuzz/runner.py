"""The in-process mutation loop behind ``make fuzz`` and the brief run of ``make test``.

A reader's time is spent on mutants of its seeds; every input is timed in CPU time (this
process's, :func:`time.process_time`), so that a loaded machine neither makes an input slow nor
shortens a run, a hang is cut by a timer (CPU time, and a generous wall-clock one for an input
that blocks) and counted as slow, and an exception outside the reader's documented errors is a
failure kept with its traceback. Each reader gets an equal share of the CPU time and at most
:data:`SHARE_CAP` times an equal share of the inputs; readers run slowest first, so that the
fast ones take up what the slow ones leave, up to their cap.
"""

from __future__ import annotations

import os
import random
import resource
import signal
import time
import traceback
from dataclasses import dataclass, field
from types import FrameType
from typing import TextIO

from tests.fuzz.mutate import mutate
from tests.fuzz.targets import Broken, Target, _nvfabric_error, targets

#: An input still running after this many seconds of CPU time is stopped (and fails as slow).
HANG_S = 20
#: ... or after this many seconds of wall-clock time (an input that blocks uses no CPU).
HANG_WALL_S = 120
#: No reader takes more than this many times an equal share of the inputs: the run's count
#: is spread over the readers, not made by the fastest one alone.
SHARE_CAP = 2.0
#: One input that raises the process's peak memory by this much is reported (and kept).
MEMORY_JUMP_MIB = 256


class _Hang(BaseException):
    pass


def _alarm(_sig: int, _frame: FrameType | None) -> None:
    raise _Hang()


def _arm(cpu_s: float, wall_s: float) -> None:
    """Both hang timers (0: both off)."""
    signal.setitimer(signal.ITIMER_PROF, cpu_s)
    signal.setitimer(signal.ITIMER_REAL, wall_s)


@dataclass
class Stats:
    name: str
    inputs: int = 0
    documented: int = 0
    failures: int = 0
    distinct: dict[str, int] = field(default_factory=dict)
    slowest_s: float = 0.0
    slowest_size: int = 0
    slowest_path: str = ""
    elapsed_s: float = 0.0
    #: The largest rise of the process's peak RSS one input caused, in MiB.
    memory_jump_mib: int = 0


@dataclass
class Report:
    stats: list[Stats]
    slow_s: float
    #: CPU seconds of the whole run, and its wall-clock seconds
    elapsed_s: float
    wall_s: float = 0.0

    @property
    def total(self) -> int:
        return sum(s.inputs for s in self.stats)

    def ok(self, min_inputs: int) -> bool:
        return (self.total >= min_inputs and all(s.failures == 0 for s in self.stats)
                and all(s.slowest_s <= self.slow_s for s in self.stats)
                and all(s.memory_jump_mib < MEMORY_JUMP_MIB for s in self.stats))

    def text(self) -> str:
        rows = [f"{'reader':26} {'inputs':>9} {'refused':>9} {'failures':>8} "
                f"{'slowest s':>9} {'bytes':>8} {'+MiB':>5}"
                "   (slowest: CPU seconds of one input)"]
        for s in self.stats:
            rows.append(f"{s.name:26} {s.inputs:>9} {s.documented:>9} {s.failures:>8} "
                        f"{s.slowest_s:>9.3f} {s.slowest_size:>8} {s.memory_jump_mib:>5}")
            for what, count in sorted(s.distinct.items()):
                rows.append(f"    failure x{count}: {what}")
        worst = max(self.stats, key=lambda s: s.slowest_s, default=None)
        rows.append(f"total: {self.total} inputs over {len(self.stats)} readers in "
                    f"{self.elapsed_s:.0f} s of CPU ({self.wall_s:.0f} s wall); failures: "
                    f"{sum(s.failures for s in self.stats)}")
        if worst is not None:
            rows.append(f"slowest input: {worst.name}, {worst.slowest_s:.3f} s, "
                        f"{worst.slowest_size} bytes"
                        + (f" (saved as {worst.slowest_path})" if worst.slowest_path else ""))
        return "\n".join(rows)


def _where(err: BaseException) -> str:
    """``Type at file:line`` of the innermost frame in nvfabric (or the last one)."""
    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if "/nvfabric/" in f.filename] or frames
    last = ours[-1] if ours else None
    spot = f" at {os.path.basename(last.filename)}:{last.lineno}" if last else ""
    return f"{type(err).__name__}{spot}"


def _save(out: str, name: str, n: int, data: bytes, note: str) -> str:
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"{name}-{n}.bin")
    with open(path, "wb") as fh:
        fh.write(data)
    with open(path + ".txt", "w", encoding="utf-8") as fh:
        fh.write(note)
    return path


def run_target(target: Target, rng: random.Random, budget_s: float, max_inputs: int,
               slow_s: float, out: str | None) -> Stats:
    """Fuzz one reader until ``budget_s`` seconds of CPU time or ``max_inputs``; the seeds
    themselves first."""
    stats = Stats(target.name)
    seeds = [s[: target.limit] for s in target.seeds()]
    if not seeds:
        raise RuntimeError(f"{target.name}: no seeds (corpus missing?)")
    start = time.process_time()
    previous = (signal.signal(signal.SIGALRM, _alarm), signal.signal(signal.SIGPROF, _alarm))
    saved = 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    try:
        queue = list(seeds)
        while stats.inputs < max_inputs and time.process_time() - start < budget_s:
            data = queue.pop() if queue else mutate(rng, rng.choice(seeds), seeds, target.limit)
            stats.inputs += 1
            t0 = time.process_time()
            _arm(HANG_S, HANG_WALL_S)
            failure: BaseException | None = None
            try:
                target.run(data)
            except target.documented as err:
                stats.documented += 1
                try:
                    _nvfabric_error(err)
                except Broken as broken:
                    failure = broken
            except _Hang:
                failure = _Hang(f"still running after {HANG_S} s of CPU time or "
                                f"{HANG_WALL_S} s of wall-clock time")
            except Exception as err:  # noqa: BLE001 - that is what we look for
                failure = err
            except RecursionError as err:  # pragma: no cover - a subclass of Exception
                failure = err
            finally:
                _arm(0, 0)
            took = time.process_time() - t0
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
            if rss - peak > stats.memory_jump_mib:
                stats.memory_jump_mib = rss - peak
                if rss - peak >= MEMORY_JUMP_MIB and out:
                    _save(out, f"{target.name}-memory", 0, data, f"+{rss - peak} MiB\n")
            peak = max(peak, rss)
            if failure is not None:
                stats.failures += 1
                key = _where(failure)
                stats.distinct[key] = stats.distinct.get(key, 0) + 1
                if out and saved < 50 and stats.distinct[key] <= 3:
                    saved += 1
                    _save(out, f"{target.name}-failure", saved, data,
                          "".join(traceback.format_exception(failure)))
            if took > stats.slowest_s:
                stats.slowest_s, stats.slowest_size = took, len(data)
                if took > slow_s and out:
                    stats.slowest_path = _save(out, f"{target.name}-slow", 0, data,
                                               f"{took:.3f} s\n")
    finally:
        _arm(0, 0)
        signal.signal(signal.SIGALRM, previous[0])
        signal.signal(signal.SIGPROF, previous[1])
        if target.teardown is not None:
            target.teardown()
    stats.elapsed_s = time.process_time() - start
    return stats


def _rate(target: Target, rng: random.Random) -> float:
    """Inputs a CPU second on a few mutants (to order the readers, slowest first)."""
    seeds = target.seeds()
    t0 = time.process_time()
    n = 0
    for _ in range(20):
        data = mutate(rng, rng.choice(seeds), seeds, min(target.limit, 20_000))
        n += 1
        try:
            target.run(data)
        except Exception:  # noqa: BLE001, S112 - calibration only; the real run reports
            continue
    return n / max(time.process_time() - t0, 1e-6)


def run_all(inputs: int, seconds: float, seed: int, slow_s: float, only: set[str] | None,
            out: str | None, progress: TextIO | None = None) -> Report:
    """Every reader (or ``only``), sharing ``seconds`` of CPU time and ``inputs``."""
    rng = random.Random(seed)
    chosen = [t for t in targets() if only is None or t.name in only]
    start = time.process_time()
    wall = time.monotonic()
    rates = {t.name: _rate(t, random.Random(seed)) for t in chosen}
    order = sorted(chosen, key=lambda t: rates[t.name])
    cap = max(1, int(SHARE_CAP * inputs / max(1, len(order))))
    results: dict[str, Stats] = {}
    for i, target in enumerate(order):
        left = len(order) - i
        time_left = max(0.0, seconds - (time.process_time() - start))
        inputs_left = max(0, inputs - sum(s.inputs for s in results.values()))
        stats = run_target(target, rng, time_left / left, min(cap, max(1, inputs_left // left)),
                           slow_s, out)
        results[target.name] = stats
        if progress is not None:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
            progress.write(f"fuzz: {stats.name}: {stats.inputs} inputs, {stats.failures} "
                           f"failures, slowest {stats.slowest_s:.3f} s "
                           f"({stats.elapsed_s:.0f} s CPU; peak RSS so far {rss} MiB)\n")
            progress.flush()
    return Report([results[t.name] for t in chosen], slow_s, time.process_time() - start,
                  time.monotonic() - wall)
