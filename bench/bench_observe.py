"""Benchmark of watching a run (issue 14): ``nvfabric run --listen`` on a simulated DGX B200 with
zero-delay fakes.

Figures:

- ``/readyz`` latency, p50 and p99 over READYZ_N requests (one connection each, as a kubelet
  probe makes them; target p99 <= 2 ms), against the median wall time of an exec of
  ``nvfabric status`` (what an exec probe costs).
- socket -> fabric manager exec (as bench_run.py measures it: NVLSM's bind of its socket to
  nvfabric's "started fabricmanager" line), median over RUNS fresh nodes, without and with a
  scraper GETting ``/metrics`` 10 times a second from the run's start: serving must not
  disturb the supervisor.
- idle CPU of ``run --listen`` once ready, with a scrape every 15 s, over IDLE_S seconds
  (target < 0.1 % of a core): the run's own CPU, and with its reaped children (the fabric
  re-read every ``--health-interval`` 30 s runs the simulated node's nvidia-smi, a Python
  process; NVML on a real node is read in-process).

Usage: ``bench_observe.py [RUNS] [IDLE_S] [READYZ_N]`` (defaults 8, 60 and 500).
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import PY, StderrLines, line, process_ms  # noqa: E402

from nvfabric.simulate import build, profile_spec
from nvfabric.simulate.fakes import calls, install, set_faults

_SCRIPT = Path(PY).parent / "nvfabric"
NVFABRIC = [str(_SCRIPT)] if _SCRIPT.exists() else [PY, "-m", "nvfabric"]
ZERO_DELAY = {"nvlsm": {"socket_delay_s": 0}, "fabricmanager": {"register_delay_s": 0}}
BOUND_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


class Node:
    """A fresh simulated DGX B200 and ``nvfabric run --listen`` on it, log lines timestamped
    on arrival."""

    def __init__(self, base: str, n: int, *args: str) -> None:
        self.root = os.path.join(base, f"node{n}")
        build(profile_spec("dgx-b200"), self.root)
        install(self.root)
        set_faults(self.root, ZERO_DELAY)
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
        self.proc = subprocess.Popen(
            [*NVFABRIC, "run", "--root", self.root, "--listen", f"127.0.0.1:{self.port}",
             *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, env=env)
        assert self.proc.stderr is not None
        self.err = StderrLines(self.proc.stderr, BOUND_S)


    def until(self, needle: str) -> float:
        return self.err.until(needle)

    def socket_time(self) -> float:
        return float(next(c for c in calls(self.root)
                          if c["prog"] == "nvlsm" and c["event"] == "socket")["t"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def cpu_ticks(pid: int, children: bool = False) -> int:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    own = int(fields[11]) + int(fields[12])  # utime + stime
    return own + (int(fields[13]) + int(fields[14]) if children else 0)  # + cutime, cstime


def scraper(port: int, per_s: float, stop: threading.Event) -> None:
    while not stop.wait(1 / per_s):
        try:
            get(port, "/metrics")
        except OSError:
            pass  # not listening yet


def socket_to_fm(base: str, runs: int, scrape: bool) -> list[float]:
    out = []
    for n in range(runs + 1):
        node = Node(base, n + (1000 if scrape else 0))
        stop = threading.Event()
        if scrape:
            threading.Thread(target=scraper, args=(node.port, 10.0, stop), daemon=True).start()
        try:
            spawned = node.until("started fabricmanager")
            node.until("fabric ready in")
            sock = node.socket_time()
        finally:
            stop.set()
            node.stop()
        if n:  # the first is a warm-up
            out.append((spawned - sock) * 1000)
    return out


def readyz(base: str, n: int) -> None:
    node = Node(base, 9999)
    try:
        node.until("fabric ready in")
        deadline = time.monotonic() + BOUND_S  # the first reading of the fabric is done
        while get(node.port, "/status") != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        for _ in range(20):  # warm-up
            get(node.port, "/readyz")
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            status = get(node.port, "/readyz")
            samples.append((time.perf_counter() - t0) * 1000)
            assert status == 200
        samples.sort()
        p99 = samples[int(len(samples) * 0.99) - 1]
        line(f"/readyz latency p50 / p99 of {n} (target p99 <= 2 ms)",
             f"{statistics.median(samples):.2f} ms / {p99:.2f} ms")
        status_ms = process_ms([*NVFABRIC, "status", "--root", node.root], runs=5)
        line("  for comparison: exec of `nvfabric status` (median of 5)", f"{status_ms:.0f} ms")
    finally:
        node.stop()


def idle_cpu(base: str, idle_s: float) -> None:
    node = Node(base, 5000)
    stop = threading.Event()
    try:
        node.until("fabric ready in")
        time.sleep(2.0)  # the first reading and the last probe are done
        pid = node.proc.pid
        own0, all0, t0 = cpu_ticks(pid), cpu_ticks(pid, True), time.monotonic()
        threading.Thread(target=scraper, args=(node.port, 1 / 15, stop), daemon=True).start()
        time.sleep(idle_s)
        own1, all1, t1 = cpu_ticks(pid), cpu_ticks(pid, True), time.monotonic()
        hz = os.sysconf("SC_CLK_TCK")
        own = (own1 - own0) / hz / (t1 - t0) * 100
        every = (all1 - all0) / hz / (t1 - t0) * 100
        line(f"idle run --listen, scrape every 15 s, {idle_s:.0f} s (target < 0.1 %)",
             f"{own:.3f} % of a core (with the re-read's nvidia-smi children {every:.3f} %)")
    finally:
        stop.set()
        node.stop()


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    idle_s = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
    readyz_n = int(sys.argv[3]) if len(sys.argv) > 3 else 500
    base = tempfile.mkdtemp(prefix="nvfabric-bench-observe-")
    try:
        readyz(base, readyz_n)
        quiet = socket_to_fm(base, runs, scrape=False)
        busy = socket_to_fm(base, runs, scrape=True)
        line(f"socket -> fabric manager exec, median of {runs}: no scraper / 10 scrapes/s",
             f"{statistics.median(quiet):.1f} ms / {statistics.median(busy):.1f} ms "
             f"(max {max(quiet):.1f} / {max(busy):.1f})")
        idle_cpu(base, idle_s)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
