"""Benchmark of nvfabric.service under a real systemd service manager (issue 12): the same
harness as tests/integration/test_systemd_unit.py (``systemd --user`` in a private mount
namespace and a cgroup of its own; the unit as ``nvfabric unit install`` writes it, a drop-in
pointing ExecStart at a simulated DGX B200 with zero-delay fakes).

Figures (median and range over RUNS start/stop cycles, each on a fresh simulated node):

- systemctl start -> returned: ``systemctl --user start nvfabric.service`` wall time, which
  ends only after nvfabric's READY=1 (every GPU's fabric state completed); beside it
  nvfabric's own ``ready_after_s`` (from its unit start to ready: the rest is Python start-up,
  plan and preflight, and systemd's fork/exec with the sandbox's mount namespace);
- systemctl stop -> returned: fabric manager then NVLSM stopped, the unit inactive;
- nvlsm SIGKILLed -> unit running again, once (RestartSec=5s included).

Needs root, systemd, util-linux (``unshare``, ``nsenter``). Usage: ``bench_systemd.py [RUNS]``
(default 5). 2-core VM shared with other work: expect noise.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))

from tests.integration.usermanager import Node, UserManager  # noqa: E402


def spread(values: list[float]) -> str:
    return (f"median {statistics.median(values):.2f} s "
            f"(min {min(values):.2f}, max {max(values):.2f}, n={len(values)})")


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    if os.geteuid() != 0:
        print("bench_systemd: needs root (a systemd user manager in its own mount namespace)")
        return 1
    manager = UserManager()
    work = Path(tempfile.mkdtemp(prefix="nvf-bench-sd-"))
    starts, readies, stops = [], [], []
    try:
        manager.start()
        for i in range(runs):
            (work / f"run{i}").mkdir()
            node = Node(manager, work / f"run{i}")
            try:
                starts.append(node.start())
                ready = node.ready()["ready_after_s"]
                assert isinstance(ready, float)
                readies.append(ready)
                stops.append(node.stop())
            finally:
                node.cleanup()
        (work / "restart").mkdir()
        node = Node(manager, work / "restart")
        try:
            node.start()
            before = node.props("MainPID")["MainPID"]
            services = node.ready()["services"]
            assert isinstance(services, list)
            nvlsm = next(s["pid"] for s in services if s["service"] == "nvlsm")
            t0 = time.perf_counter()
            os.kill(nvlsm, signal.SIGKILL)
            while True:
                p = node.props("MainPID", "SubState", "NRestarts")
                if p["NRestarts"] == "1" and p["SubState"] == "running" and \
                        p["MainPID"] != before:
                    break
                if time.perf_counter() - t0 > 120:
                    raise AssertionError("the unit did not come back within 120 s")
                time.sleep(0.02)
            restart = time.perf_counter() - t0
        finally:
            node.cleanup()
    finally:
        manager.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"systemctl start -> returned after READY=1: {spread(starts)}")
    print(f"  of which nvfabric's ready_after_s:       {spread(readies)}")
    print(f"systemctl stop -> returned:                {spread(stops)}")
    print(f"nvlsm SIGKILLed -> unit running again:     {restart:.2f} s (RestartSec=5s included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
