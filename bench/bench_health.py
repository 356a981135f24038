"""Benchmark of the health and diagnosis commands (issue "Fabric health and diagnosis").

1. ``nvfabric status --from-nvidia-smi`` on 8-GPU captures: whole-process wall time (median of
   N runs, interleaved with ``python3 -c pass`` on the same interpreter) and the ratio (issue 11
   target for ``--json``: at most 4x).
2. ``nvfabric doctor`` on a 200 MB synthetic fabric manager log (generated in a temp dir from
   the line shapes of tests/data/corpus/logs/gpud-hgx-h100-535.161.08-fabricmanager.log, with
   0.1% failure lines): throughput and peak RSS (target >= 50 MB/s, < 60 MB), side by side with
   ``grep -E -c`` of the same signature needles.

Run: .venv/bin/python bench/bench_health.py  (prints plain lines; about a minute)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "data" / "corpus"
RUNS = int(os.environ.get("BENCH_RUNS", "15"))
LOG_MB = int(os.environ.get("BENCH_LOG_MB", "200"))

sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "bench"))

from common import interleaved_ms, startup_ratio  # noqa: E402


def run_measured(argv: list[str]) -> tuple[float, float, int, bytes]:
    """(wall seconds, peak RSS MB, exit code, stdout) of one child.

    Peak RSS is the child's own VmHWM from /proc/<pid>/status, polled every 5 ms while it runs
    (wait4's ru_maxrss would include this benchmark's memory, inherited across fork and exec).
    """
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL)  # noqa: S603
        peak_kb = 0
        status = f"/proc/{proc.pid}/status"
        while proc.poll() is None:
            try:
                with open(status) as fh:
                    for line in fh:
                        if line.startswith("VmHWM:"):
                            peak_kb = max(peak_kb, int(line.split()[1]))
            except (OSError, ValueError):
                pass
            time.sleep(0.005)
        elapsed = time.perf_counter() - t0
        out.seek(0)
        return elapsed, peak_kb / 1024.0, proc.returncode, out.read()


TEMPLATES = [
    "[{ts}] [INFO] [tid 1579] Received an inband message:  Message header details: magic "
    "Id:adbc request Id:{h:x} status:0 type:2 length:56",
    "Message payload details:Team setup request: Allocation Size:60000000 Flags:0 Number of "
    "GPUs:8 GPU Handles:203acba0a7853521 ebd867c5b4df712f 91f357befdf5779d 10dbe3d570b7debe "
    "aa8f62a63b474b1c 42b6541a7c99b6c6 2d4131df9e28ae09 8e4e8b14fb982022",
    "",
    "[{ts}] [INFO] [tid 1584] multicast group {g} is allocated.",
    "[{ts}] [INFO] [tid 1584] successfully setup multicast team for request id {n}.",
    "[{ts}] [INFO] [tid 1372] Sending inband response message:  Message header details: magic "
    "Id:adbc request Id:{h:x} status:0 type:3 length:24",
    "Message payload details:Team setup response: Team Handle:{h:x} Flags:0 Address "
    "Base:c008000000000 Address Size:60000000",
    "",
    "[{ts}] [INFO] [tid 1584] multicast group {g} is freed.",
    "[{ts}] [INFO] [tid 1584] successfully released multicast team with handle {n}.",
]
FAULTS = [
    "[{ts}] [ERROR] [tid 1374] detected NVSwitch non-fatal error 12028 on fid 0 on NVSwitch pci "
    "bus id 00000000:86:00.0 physical id 3 port {g}",
    "[{ts}] [ERROR] [tid 1183] fabric manager NVIDIA GPU driver interface version 530.30.02 "
    "don't match with driver version 530.41.03. Please update with matching NVIDIA driver "
    "package.",
    "[{ts}] [ERROR] [tid 77] fabric manager config file item: FABRIC_NODE_CONFIG_FILE has an "
    "invalid value",
]


def make_log(path: Path, megabytes: int) -> int:
    """Write a synthetic fabric manager log of about ``megabytes`` MB; returns bytes."""
    lines = []
    for i in range(20000):
        ts = f"Dec 18 2024 {i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}"
        fmt = FAULTS[i % len(FAULTS)] if i % 1000 == 999 else TEMPLATES[i % len(TEMPLATES)]
        lines.append(fmt.format(ts=ts, h=(i * 2654435761) & 0xFFFFFFFFFFFF, g=i % 64,
                                n=i * 7919))
    block = ("\n".join(lines) + "\n").encode()
    target = megabytes * 1_000_000
    written = 0
    with open(path, "wb") as fh:
        while written < target:
            fh.write(block)
            written += len(block)
    return written


def ere(needles: list[str]) -> str:
    return "|".join(re.sub(r"([][\\.^$*+?(){}|])", r"\\\1", n) for n in needles)


def main() -> None:
    py = sys.executable
    script = Path(py).parent / "nvfabric"  # the console script operators run
    nvfabric = [str(script)] if script.exists() else [py, "-m", "nvfabric"]
    with open("/proc/loadavg", encoding="utf-8") as fh:
        print(f"load average (1, 5, 15 min): {' '.join(fh.read().split()[:3])}")
    for name in ("k8s-test-infra-hw-qx-b200.xml", "hgx-h100-535.161.08-nvidia-smi-q.txt"):
        capture = CORPUS / "nvidia-smi" / name
        for extra in (["--json"], []):
            argv = [*nvfabric, "status", "--from-nvidia-smi", str(capture), *extra]
            base, cmd = interleaved_ms([[py, "-c", "pass"], argv], RUNS)
            rc = subprocess.run(argv, capture_output=True, check=False).returncode
            label = "--json" if extra else "human"
            print(f"nvfabric status --from-nvidia-smi {name} ({label}): "
                  + (startup_ratio(cmd, base) if extra else
                     f"{statistics.median(cmd):.1f} ms (min {min(cmd):.1f})")
                  + f", {statistics.median(cmd) - statistics.median(base):.1f} ms over python "
                  f"start-up ({statistics.median(base):.1f} ms), exit {rc}")

    from nvfabric.rules.catalogue import catalogue

    needles = sorted({s.needle for s in catalogue()})
    tmp = Path(tempfile.mkdtemp(prefix="nvfabric-bench-"))
    try:
        log = tmp / "fabricmanager.log"
        t0 = time.perf_counter()
        size = make_log(log, LOG_MB)
        print(f"synthetic fabric manager log: {size / 1e6:.0f} MB written in "
              f"{time.perf_counter() - t0:.1f} s")
        elapsed, rss, rc, out = run_measured(
            [py, "-m", "nvfabric", "doctor", "--log", str(log), "--json"])
        result = json.loads(out)
        matched = sum(f["count"] for f in result["findings"])
        print(f"nvfabric doctor: {elapsed:.2f} s, {size / 1e6 / elapsed:.0f} MB/s, peak RSS "
              f"{rss:.1f} MB, {len(result['findings'])} findings from {matched} matching lines "
              f"of {result['lines']}, exit {rc} (targets: >= 50 MB/s, < 60 MB)")
        grep = shutil.which("grep")
        if grep:
            g_elapsed, g_rss, _, g_out = run_measured([grep, "-E", "-c", ere(needles), str(log)])
            print(f"grep -E -c ({len(needles)} needles): {g_elapsed:.2f} s, "
                  f"{size / 1e6 / g_elapsed:.0f} MB/s, peak RSS {g_rss:.1f} MB, "
                  f"{int(g_out or 0)} lines containing a needle")
        else:
            print("grep -E: not installed, skipped")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
