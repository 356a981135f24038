"""Benchmark of ``nvfabric run`` (issue "The main job") on the simulated DGX B200 with
zero-delay fakes (NVLSM creates its socket at once, fabric manager registers the GPUs at once).

Figures (median over RUNS fresh nodes unless said):

- socket -> fabric manager exec: from NVLSM's bind of its IPC socket (the fake's wall-clock
  record) to nvfabric's "started fabricmanager" log line (written right after posix_spawn
  returned, i.e. after the exec), timestamped on arrival here. Target < 20 ms; the vendor
  script sleeps 5 s, another wrapper polls every 100 ms then sleeps 1 s. Also: to the fake
  fabric manager's first Python line (adds the interpreter's own start-up).
- nvfabric run -> ready: from the spawn of ``nvfabric run`` to its "fabric ready" line.
- nvlsm killed -> nvfabric exited with fabric manager stopped (target < 100 ms plus the fake's
  own shutdown).
- nvfabric run killed with SIGKILL -> NVLSM and fabric manager gone (no handler of nvfabric
  runs: their parent-death signal, PR_SET_PDEATHSIG = SIGTERM, stops them; before it they
  lived on as orphans).
- idle supervisor: CPU over IDLE_S seconds once ready (target < 0.1 % of a core) and RSS
  (target < 40 MB).

Usage: ``bench_run.py [RUNS] [IDLE_S]`` (defaults 10 and 60).
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import PY, line  # noqa: E402

from nvfabric.simulate import build, profile_spec
from nvfabric.simulate.fakes import calls, install, set_faults

_SCRIPT = Path(PY).parent / "nvfabric"
NVFABRIC = [str(_SCRIPT)] if _SCRIPT.exists() else [PY, "-m", "nvfabric"]
ZERO_DELAY = {"nvlsm": {"socket_delay_s": 0}, "fabricmanager": {"register_delay_s": 0}}
BOUND_S = 30.0


class Node:
    """A fresh simulated DGX B200 and ``nvfabric run`` on it, log lines timestamped."""

    def __init__(self, base: str, n: int) -> None:
        self.root = os.path.join(base, f"node{n}")
        build(profile_spec("dgx-b200"), self.root)
        install(self.root)
        set_faults(self.root, ZERO_DELAY)
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
        self.t_start = time.time()
        self.proc = subprocess.Popen([*NVFABRIC, "run", "--root", self.root],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self.lines: queue.Queue[tuple[float, str] | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.seen: list[tuple[float, str]] = []

    def _pump(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.lines.put((time.time(), raw.rstrip("\n")))
        self.lines.put(None)

    def until(self, needle: str) -> float:
        for t, text in self.seen:
            if needle in text:
                return t
        deadline = time.monotonic() + BOUND_S
        while True:
            item = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if item is None:
                raise RuntimeError(f"nvfabric run ended before {needle!r}")
            self.seen.append(item)
            if needle in item[1]:
                return item[0]

    def event(self, prog: str, event: str) -> dict[str, object]:
        return next(c for c in calls(self.root) if c["prog"] == prog and c["event"] == event)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def exit_time(proc: subprocess.Popen[str]) -> float:
    """Wall time at which ``proc`` exited: a blocking wait in a thread (``Popen.wait`` with a
    timeout polls with sleeps doubling up to 50 ms, which rounded an exit at 32 ms up to 64)."""
    done: list[float] = []

    def waiter() -> None:
        proc.wait()
        done.append(time.time())

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    thread.join(BOUND_S)
    if not done:
        raise RuntimeError("nvfabric run did not exit")
    return done[0]


def gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie waiting for its new parent counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
        for row in fh:
            if row.startswith("VmRSS:"):
                return int(row.split()[1]) / 1024
    return float("nan")


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    idle_s = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
    base = tempfile.mkdtemp(prefix="nvfabric-bench-run-")
    to_spawn, to_fm_code, to_ready, kill_to_exit = [], [], [], []
    kill_to_noticed, kill_to_fm_stopped = [], []
    try:
        for n in range(runs + 1):
            node = Node(base, n)
            try:
                ready = node.until("fabric ready in")
                spawned = node.until("started fabricmanager")
                sock = float(node.event("nvlsm", "socket")["t"])  # type: ignore[arg-type]
                fm = float(node.event("fabricmanager", "exec")["t"])  # type: ignore[arg-type]
                sm_pid = int(node.event("nvlsm", "exec")["pid"])  # type: ignore[call-overload]
                t_kill = time.time()
                os.kill(sm_pid, signal.SIGKILL)
                t_exit = exit_time(node.proc)
                t_noticed = node.until("error service_exited: nvlsm")
                t_fm_stopped = node.until("fabricmanager stopped")
            finally:
                node.stop()
            if n == 0:
                continue  # warm-up: page cache, .pyc files
            to_spawn.append((spawned - sock) * 1000)
            to_fm_code.append((fm - sock) * 1000)
            to_ready.append((ready - node.t_start) * 1000)
            kill_to_exit.append((t_exit - t_kill) * 1000)
            kill_to_noticed.append((t_noticed - t_kill) * 1000)
            kill_to_fm_stopped.append((t_fm_stopped - t_kill) * 1000)
        line(f"socket -> fabric manager exec, median of {runs} (target < 20 ms)",
             f"{statistics.median(to_spawn):.1f} ms (max {max(to_spawn):.1f})")
        line("socket -> fake fabric manager's first line (+ its Python start)",
             f"{statistics.median(to_fm_code):.1f} ms")
        line("  for comparison: vendor start script / polling wrapper", "5000 ms / 100-1100 ms")
        line(f"nvfabric run -> fabric ready, median of {runs}",
             f"{statistics.median(to_ready):.0f} ms")
        line("nvlsm killed -> nvfabric exited, fabric manager stopped",
             f"{statistics.median(kill_to_exit):.1f} ms (max {max(kill_to_exit):.1f})")
        line("  of which: killed -> exit noticed and logged",
             f"{statistics.median(kill_to_noticed):.1f} ms")
        line("  of which: killed -> fabric manager stopped (its own shutdown)",
             f"{statistics.median(kill_to_fm_stopped):.1f} ms")

        orphans_gone = []
        for n in range(5):
            node = Node(base, runs + 10 + n)
            try:
                node.until("fabric ready in")
                pids = [int(node.event(prog, "exec")["pid"])  # type: ignore[call-overload]
                        for prog in ("nvlsm", "fabricmanager")]
                t_kill = time.monotonic()
                node.proc.kill()
                node.proc.wait(BOUND_S)
                while not all(gone(pid) for pid in pids):
                    if time.monotonic() - t_kill > BOUND_S:
                        raise RuntimeError(f"daemons {pids} outlived nvfabric run")
                    time.sleep(0.0005)
                orphans_gone.append((time.monotonic() - t_kill) * 1000)
            finally:
                node.stop()
        line("nvfabric run SIGKILLed -> NVLSM and fabric manager gone, median of 5",
             f"{statistics.median(orphans_gone):.1f} ms (max {max(orphans_gone):.1f})")

        node = Node(base, runs + 1)
        try:
            node.until("fabric ready in")
            time.sleep(1.0)  # let the ready-time work (probe thread, file writes) settle
            hz = os.sysconf("SC_CLK_TCK")
            t0, c0 = time.monotonic(), cpu_ticks(node.proc.pid)
            time.sleep(idle_s)
            t1, c1 = time.monotonic(), cpu_ticks(node.proc.pid)
            rss = rss_mb(node.proc.pid)
            cpu = (c1 - c0) / hz / (t1 - t0) * 100
            line(f"idle supervisor CPU over {idle_s:g} s (target < 0.1 % of a core)",
                 f"{cpu:.3f} % ({c1 - c0} ticks of 1/{hz} s)")
            line("idle supervisor RSS (target < 40 MB)", f"{rss:.1f} MB")
            node.proc.send_signal(signal.SIGTERM)
            code = node.proc.wait(BOUND_S)
            line("exit code after SIGTERM", str(code))
        finally:
            node.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
