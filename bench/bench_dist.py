"""Benchmark of the single-file binary (``make dist``, issue 12 "A Debian package and a
single-file binary").

Figures: size of dist/nvfabric and of the Debian package (``make deb``); median start-up
(wall time of a whole process) of ``nvfabric --version`` and ``nvfabric plan --json`` on a
simulated DGX B200, for the binary and for the interpreter's console script side by side (the
binary unpacks its libraries into a private temporary directory at every start); peak RSS of
``plan --json``; and a fake daemon's start from the binary (``nvidia-smi -L`` of the
simulated node). Builds the binary with ``make dist`` when it is missing or stale, and the
package with ``make deb``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import PY, line, peak_rss_mb, process_ms  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BINARY = REPO / "dist" / "nvfabric"
_SCRIPT = Path(PY).parent / "nvfabric"
NVFABRIC = [str(_SCRIPT)] if _SCRIPT.exists() else [PY, "-m", "nvfabric"]


def main() -> int:
    subprocess.run(["make", "-s", "dist"], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    line("dist/nvfabric size", f"{BINARY.stat().st_size / 1e6:.1f} MB")
    deb = subprocess.run(["make", "-s", "deb"], cwd=REPO, check=True, capture_output=True,
                         text=True).stdout.strip().splitlines()[-1]
    installed = subprocess.run(["dpkg-deb", "--field", deb, "Installed-Size"], check=True,
                               capture_output=True, text=True).stdout.strip()
    line(f"{os.path.basename(deb)} size / installed",
         f"{os.path.getsize(deb) / 1e6:.1f} MB / {int(installed) / 1e3:.1f} MB")
    tmp = tempfile.mkdtemp(prefix="nvfabric-bench-dist-")
    try:
        root = os.path.join(tmp, "b200")
        subprocess.run([str(BINARY), "simulate", "dgx-b200", root], check=True,
                       stdout=subprocess.DEVNULL)
        for label, args in (("--version", ["--version"]),
                            ("plan --json (DGX B200)", ["plan", "--root", root, "--json"])):
            frozen = process_ms([str(BINARY), *args], runs=15)
            script = process_ms([*NVFABRIC, *args], runs=15)
            line(f"start-up {label}: binary / interpreter", f"{frozen:.0f} ms / {script:.0f} ms")
        line("peak RSS plan --json: binary (both processes' max)",
             f"{peak_rss_mb([str(BINARY), 'plan', '--root', root, '--json']):.0f} MiB")
        smi = os.path.join(root, "usr/bin/nvidia-smi")
        line("fake nvidia-smi -L from the binary", f"{process_ms([smi, '-L'], runs=15):.0f} ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
