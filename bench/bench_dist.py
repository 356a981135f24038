"""Benchmark of the PyInstaller builds: the single-file binary (``make dist``) and the
directory build (``make dist-dir``, what the Debian package, the container image and the Talos
extension carry).

Figures: size of dist/nvfabric, of dist/nvfabric-dir/ and of the Debian package (``make
deb``); median start-up (wall time of a whole process) of ``nvfabric --version`` and
``nvfabric plan --json`` on a simulated DGX B200 for the one-file binary (it unpacks its
libraries into a private temporary directory at every start), the one-dir build (nothing
unpacked) and the interpreter's console script side by side; the same two from the installed
package (its files as dpkg lays them out, ``/usr/bin/nvfabric`` the link to the directory
build); peak RSS of ``plan --json``; a fake daemon's start from each build (``nvidia-smi -L``
of a simulated node); what a SIGKILLed start leaves in TMPDIR. Builds with ``make dist
dist-dir`` when missing or stale, and the package with ``make deb``.

``--compare OLD.deb``: another build of the package (an earlier version, e.g. the one that
carried the one-file binary) measured beside it: its size and its installed start-up, the
two packages' runs interleaved so that a busy spell of a shared machine weighs on both alike.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import PY, interleaved_ms, line, peak_rss_mb, process_ms  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BINARY = REPO / "dist" / "nvfabric"
ONEDIR = REPO / "dist" / "nvfabric-dir" / "nvfabric"
_SCRIPT = Path(PY).parent / "nvfabric"
NVFABRIC = [str(_SCRIPT)] if _SCRIPT.exists() else [PY, "-m", "nvfabric"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compare", metavar="OLD.deb",
                    help="another build of the package, measured beside this one")
    args = ap.parse_args()
    subprocess.run(["make", "-s", "dist", "dist-dir"], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)
    line("dist/nvfabric size (one-file)", f"{BINARY.stat().st_size / 1e6:.1f} MB")
    size = sum(f.stat().st_size for f in ONEDIR.parent.rglob("*") if f.is_file())
    line("dist/nvfabric-dir size (one-dir)", f"{size / 1e6:.1f} MB")
    deb = subprocess.run(["make", "-s", "deb"], cwd=REPO, check=True, capture_output=True,
                         text=True).stdout.strip().splitlines()[-1]
    installed = subprocess.run(["dpkg-deb", "--field", deb, "Installed-Size"], check=True,
                               capture_output=True, text=True).stdout.strip()
    line(f"{os.path.basename(deb)} size / installed",
         f"{os.path.getsize(deb) / 1e6:.1f} MB / {int(installed) / 1e3:.1f} MB")
    if args.compare:
        old = subprocess.run(["dpkg-deb", "--field", args.compare, "Installed-Size"],
                             check=True, capture_output=True, text=True).stdout.strip()
        line(f"--compare {os.path.basename(args.compare)} size / installed",
             f"{os.path.getsize(args.compare) / 1e6:.1f} MB / {int(old) / 1e3:.1f} MB")
    tmp = tempfile.mkdtemp(prefix="nvfabric-bench-dist-")
    try:
        root = os.path.join(tmp, "b200")
        subprocess.run([str(BINARY), "simulate", "dgx-b200", root], check=True,
                       stdout=subprocess.DEVNULL)
        packages = [("package", deb)] + ([("--compare", args.compare)] if args.compare else [])
        programs = [_installed(path, os.path.join(tmp, f"deb-{i}"))
                    for i, (_, path) in enumerate(packages)]
        for label, args_ in (("--version", ["--version"]),
                             ("plan --json (DGX B200)", ["plan", "--root", root, "--json"])):
            runs = interleaved_ms([[exe, *args_] for exe in programs], runs=15)
            line(f"installed start-up {label}: " + " / ".join(n for n, _ in packages),
                 " / ".join(f"{statistics.median(r):.0f} ms (min {min(r):.0f})" for r in runs))
        for label, args in (("--version", ["--version"]),
                            ("plan --json (DGX B200)", ["plan", "--root", root, "--json"])):
            frozen = process_ms([str(BINARY), *args], runs=15)
            onedir = process_ms([str(ONEDIR), *args], runs=15)
            script = process_ms([*NVFABRIC, *args], runs=15)
            line(f"start-up {label}: one-file / one-dir / venv",
                 f"{frozen:.0f} ms / {onedir:.0f} ms / {script:.0f} ms")
        for label, exe in (("one-file", BINARY), ("one-dir", ONEDIR)):
            line(f"peak RSS plan --json: {label}",
                 f"{peak_rss_mb([str(exe), 'plan', '--root', root, '--json']):.0f} MiB")
        smi = os.path.join(root, "usr/bin/nvidia-smi")
        line("fake nvidia-smi -L from the one-file binary",
             f"{process_ms([smi, '-L'], runs=15):.0f} ms")
        root_d = os.path.join(tmp, "b200-onedir")
        subprocess.run([str(ONEDIR), "simulate", "dgx-b200", root_d], check=True,
                       stdout=subprocess.DEVNULL)
        smi = os.path.join(root_d, "usr/bin/nvidia-smi")
        line("fake nvidia-smi -L from the one-dir build",
             f"{process_ms([smi, '-L'], runs=15):.0f} ms")
        for label, exe in (("one-file", BINARY), ("one-dir", ONEDIR)):
            line(f"left in TMPDIR by a SIGKILLed start: {label}",
                 f"{_left_after_kill(exe, os.path.join(tmp, 'tmp-' + label)) / 1e6:.1f} MB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _installed(deb: str, into: str) -> str:
    """The package's files as dpkg installs them (``dpkg-deb -x`` into ``into``); its
    ``/usr/bin/nvfabric`` there."""
    subprocess.run(["dpkg-deb", "-x", deb, into], check=True)
    return os.path.join(into, "usr/bin/nvfabric")


def _left_after_kill(exe: Path, tmpdir: str) -> int:
    """Bytes left under TMPDIR by ``exe plan`` SIGKILLed (its main pid, as a supervisor that
    knows only that pid does) once it has unpacked a megabyte there, or after 2 s."""
    os.makedirs(tmpdir)
    proc = subprocess.Popen([str(exe), "plan", "--root", "/nonexistent", "--json"],
                            env={**os.environ, "TMPDIR": tmpdir}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 2.0
    while _tree_bytes(tmpdir) < 1 << 20 and time.monotonic() < deadline \
            and proc.poll() is None:
        time.sleep(0.002)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(0.5)  # a child of the main pid that outlives it may still clean up
    return _tree_bytes(tmpdir)


def _tree_bytes(top: str) -> int:
    total = 0
    for d, _, files in os.walk(top):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(d, f))
            except OSError:
                pass
    return total


if __name__ == "__main__":
    sys.exit(main())
