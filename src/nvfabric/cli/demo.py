"""``make demo``: the main job on a simulated DGX B200, end to end, in a few seconds.

1. ``nvfabric simulate dgx-b200 DIR``: a node tree with fake NVLSM, fabric manager and
   nvidia-smi (real processes);
2. ``nvfabric run --root DIR``: NVLSM on the management port, fabric manager once NVLSM's socket
   is up, ready once every GPU's fabric state is completed;
3. ``nvfabric status --root DIR`` while it runs;
4. SIGTERM: fabric manager stopped first, then NVLSM, exit 0.

Run as ``python -m nvfabric.cli.demo``; exits non-zero if any step does not do what it should.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from nvfabric.effects.log import printable

READY_BOUND_S = 20.0
STOP_BOUND_S = 20.0


def _nvfabric(*args: str) -> list[str]:
    return [sys.executable, "-m", "nvfabric", *args]


class Demo:
    def __init__(self, root: str) -> None:
        self.root = root
        self.t0 = time.monotonic()

    def show(self, text: str = "") -> None:
        print(printable(text.replace(self.root, "DIR")), flush=True)

    def step(self, title: str) -> None:
        self.show()
        self.show(f"== {title}  [{time.monotonic() - self.t0:.1f} s]")

    def command(self, *args: str) -> int:
        self.show("$ nvfabric " + " ".join(args))
        done = subprocess.run(_nvfabric(*args), capture_output=True, text=True, check=False,
                              timeout=60)
        for line in (done.stdout + done.stderr).splitlines():
            self.show("  " + line)
        return done.returncode


def _pump(stream: object, out: queue.Queue[str | None]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        out.put(line.rstrip("\n"))
    out.put(None)


def _until(demo: Demo, lines: queue.Queue[str | None], needle: str, bound: float) -> bool:
    deadline = time.monotonic() + bound
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return False
        if line is None:
            return False
        demo.show("  " + line)
        if needle in line:
            return True


def main() -> int:
    """Run the demo; 0 when every step did what it should."""
    root = tempfile.mkdtemp(prefix="nvfabric-demo-")
    demo = Demo(root)
    proc: subprocess.Popen[str] | None = None
    try:
        print("nvfabric demo: bring up the NVLink fabric of a simulated DGX B200 "
              f"(DIR = {root})", flush=True)
        demo.step("1. a simulated node: sysfs/procfs tree, fake daemons in DIR/bin")
        if demo.command("simulate", "dgx-b200", root) != 0:
            return 1
        demo.step("2. nvfabric run: NVLSM first, fabric manager when its socket is up")
        demo.show(f"$ nvfabric run --root {root}")
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
        proc = subprocess.Popen(_nvfabric("run", "--root", root), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env)
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
        if not _until(demo, lines, "fabric ready in", READY_BOUND_S):
            demo.show("demo FAILED: the fabric did not become ready")
            return 1
        demo.step("3. nvfabric status while it runs")
        status = demo.command("status", "--root", root)
        demo.step("4. SIGTERM: fabric manager stops first, then NVLSM")
        demo.show(f"$ kill -TERM {proc.pid}")
        proc.send_signal(signal.SIGTERM)
        _until(demo, lines, "\x00never", STOP_BOUND_S)
        code = proc.wait(STOP_BOUND_S)
        demo.show(f"nvfabric run exited with code {code}")
        ok = code == 0 and status == 0
        demo.show()
        demo.show(f"demo {'done' if ok else 'FAILED'} in {time.monotonic() - demo.t0:.1f} s")
        return 0 if ok else 1
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
