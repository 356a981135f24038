"""Benchmark of publishing to Kubernetes at scale: one real kube-apiserver (v1.20.2 + etcd,
tests/data/k8s/apiserver.sh) and NODES simulated nodes published concurrently, each by its own
publishing thread (:class:`nvfabric.publish.beside.Beside`, the code ``run --publish`` runs,
with its own API connection) in this one process: a process per node does not fit 2 cores.

Figures:

- steady state: API writes per node per heartbeat period while nothing changes (goal: the
  heartbeat only, 1.0), measured with a heartbeat of HEARTBEAT_S seconds over STEADY_S, and
  what that is per node per hour at the default heartbeat (300 s, node-problem-detector's);
- a verdict change on every node at once (healthy -> unhealthy with the opt-in taint, and
  back): the time from the change in the publisher's source to the API server's answer to the
  condition's write (it is stored then), p50 and p99 over every node and both directions
  (goal: p99 < 2 s at 200 nodes), and the writes each change took;
- the API server's CPU (user + system of kube-apiserver; etcd apart) in the steady state and
  during the changes, and this process's;
- what the figures imply for 10,000 nodes.

Usage: ``bench_kube.py [NODES] [STEADY_S] [HEARTBEAT_S]`` (defaults 200, 60, 20).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from nvfabric.model.findings import Finding  # noqa: E402
from nvfabric.publish.api import Api, Target  # noqa: E402
from nvfabric.publish.beside import Beside  # noqa: E402
from nvfabric.publish.node import Options  # noqa: E402
from nvfabric.rules.cluster import FabricView  # noqa: E402
from tests.integration.kubekit import ApiServer, build, condition  # noqa: E402

HEALTHY = FabricView("healthy", fabric="nvlink5")
UNHEALTHY = FabricView("unhealthy", (Finding(
    "partial_registration", "error", "GPU 3 (0000:1b:00.0) reports no fabric state among "
    "registered GPUs", "reset GPU 3, then restart the fabric"),), "nvlink5")


class CountingApi(Api):
    """The publisher's API with its writes counted and the time of each condition write's
    answer kept."""

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self.writes = 0
        self.status_at: list[float] = []

    def patch_node_status(self, name: str, body: dict[str, Any]) -> Any:
        out = super().patch_node_status(name, body)
        self.writes += 1
        self.status_at.append(time.monotonic())
        return out

    def patch_node(self, name: str, body: dict[str, Any]) -> Any:
        out = super().patch_node(name, body)
        self.writes += 1
        return out

    def create_event(self, body: dict[str, Any]) -> Any:
        out = super().create_event(body)
        self.writes += 1
        return out

    def patch_event(self, name: str, body: dict[str, Any]) -> Any:
        out = super().patch_event(name, body)
        self.writes += 1
        return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def main() -> int:
    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    steady_s = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
    heartbeat_s = float(sys.argv[3]) if len(sys.argv) > 3 else 20.0
    build()
    with tempfile.TemporaryDirectory(prefix="nvfabric-bench-kube-") as tmp:
        api = ApiServer(Path(tmp) / "apiserver").start()
        try:
            return run(api, nodes, steady_s, heartbeat_s)
        finally:
            api.stop()


def run(api: ApiServer, nodes: int, steady_s: float, heartbeat_s: float) -> int:
    names = [f"bench-node-{i:04d}" for i in range(nodes)]
    for name in names:
        api.create_node(name)
    views = dict.fromkeys(names, HEALTHY)
    apis: dict[str, CountingApi] = {}
    lock = threading.Lock()

    def connect(name: str) -> Any:
        def make() -> CountingApi:
            made = CountingApi(Target(name, str(api.admin_kubeconfig)))
            with lock:
                apis[name] = made
            return made
        return make

    i0, q0 = api.cpu_seconds(), time.monotonic()
    time.sleep(5)
    idle = (api.cpu_seconds() - i0) / (time.monotonic() - q0)  # its own work, no client
    options = Options(taint=True, heartbeat_s=heartbeat_s)
    threads = [Beside(connect(n), n, options, lambda n=n: views[n], say=lambda _: None)
               for n in names]
    t0 = time.monotonic()
    for b in threads:
        b.start()
    while len(apis) < nodes or any(not a.status_at for a in list(apis.values())):
        time.sleep(0.05)
    print(f"nodes: {nodes}, each with its own publishing thread and API connection; all "
          f"published healthy {time.monotonic() - t0:.1f} s after the start")

    # steady state: nothing changes; only heartbeats
    time.sleep(2)
    w0 = sum(a.writes for a in apis.values())
    c0, o0, s0 = api.cpu_seconds(), own_cpu(), time.monotonic()
    time.sleep(steady_s)
    w1 = sum(a.writes for a in apis.values())
    c1, o1, s1 = api.cpu_seconds(), own_cpu(), time.monotonic()
    window = s1 - s0
    per_period = (w1 - w0) / nodes / (window / heartbeat_s)
    per_hour = per_period * 3600 / 300
    api_cpu = (c1 - c0) / window
    cpu_per_write = max(0.0, api_cpu - idle) * window / max(1, w1 - w0)
    print(f"steady state over {window:.0f} s, heartbeat {heartbeat_s:g} s: {w1 - w0} writes, "
          f"{per_period:.2f} per node per heartbeat period (heartbeats only: 1.00) -> "
          f"{per_hour:.1f} writes per node per hour at the default 300 s heartbeat")
    print(f"  kube-apiserver CPU {100 * api_cpu:.1f} % of a core ({100 * idle:.1f} % idle "
          f"without clients; {1000 * cpu_per_write:.2f} ms per write above that); publishers "
          f"{100 * (o1 - o0) / window:.1f} % of a core")

    # verdict changes: every node at once, down then up
    latencies: list[float] = []
    change_writes = 0
    c2, o2 = api.cpu_seconds(), own_cpu()
    burst_s = 0.0
    for target in (UNHEALTHY, HEALTHY):
        before = {n: len(a.status_at) for n, a in apis.items()}
        wb = sum(a.writes for a in apis.values())
        start = time.monotonic()
        for n in names:
            views[n] = target
        while any(len(apis[n].status_at) == before[n] for n in names):
            time.sleep(0.01)
            if time.monotonic() - start > 120:
                raise SystemExit("a node's condition was not written within 120 s")
        done = max(apis[n].status_at[before[n]] for n in names)
        burst_s += done - start
        latencies += [apis[n].status_at[before[n]] - start for n in names]
        time.sleep(1.0)  # the taint and the Events after the condition
        change_writes += sum(a.writes for a in apis.values()) - wb
    c3, o3 = api.cpu_seconds(), own_cpu()
    stored = api.node(names[-1])
    assert condition(stored, "NVLinkFabricUnhealthy")["reason"] == "FabricHealthy"  # type: ignore[index]
    p50, p99 = statistics.median(latencies), pct(latencies, 0.99)
    per_change = change_writes / (2 * nodes)
    print(f"verdict change -> stored condition, {len(latencies)} changes ({nodes} nodes at "
          f"once, down and up): p50 {1000 * p50:.0f} ms, p99 {1000 * p99:.0f} ms, max "
          f"{1000 * max(latencies):.0f} ms (goal p99 < 2000 ms: "
          f"{'met' if p99 < 2 else 'NOT met'})")
    print(f"  {per_change:.1f} writes per node per change (condition, taint, Events); "
          f"kube-apiserver CPU {c3 - c2:.1f} s for {change_writes} writes "
          f"({1000 * (c3 - c2) / max(1, change_writes):.2f} ms each); publishers "
          f"{o3 - o2:.1f} s")
    for b in threads:
        b.stop(0.1)

    scale = 10000
    steady_rate = scale * per_hour / 3600
    burst_writes = scale * per_change / 2
    rate = change_writes / max(1e-3, burst_s + 2.0) if burst_s else 1.0
    print(f"implied for {scale} nodes: {steady_rate:.0f} writes/s in the steady state "
          f"({scale * per_hour:.0f}/h), about {100 * steady_rate * cpu_per_write:.0f} % of one "
          f"API server core; a change on every node at once is {burst_writes:.0f} writes, "
          f"about {burst_writes * (c3 - c2) / max(1, change_writes):.0f} CPU-seconds of the API "
          f"server (spread over its cores and replicas; at this server's {rate:.0f} writes/s "
          f"on 2 shared cores, {burst_writes / max(1.0, rate):.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
