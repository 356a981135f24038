"""The single-file binary ``dist/nvfabric`` for the integration tests, built by ``make dist``.

``make dist`` rebuilds only when a source changed; a lock file serialises test processes that
ask at once. Building needs PyPI (PyInstaller, into build/dist-venv) the first time.
"""

from __future__ import annotations

import fcntl
import subprocess
from pathlib import Path

from tests.integration.debroot import CACHE, REPO, require

BINARY = REPO / "dist" / "nvfabric"


def dist_binary() -> Path:
    """Path of an up-to-date ``dist/nvfabric``; AssertionError with the end of make's output
    when the build fails."""
    require("make")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "dist.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(["make", "-s", "dist"], cwd=REPO, check=False, timeout=900,
                              capture_output=True, text=True)
    if done.returncode:
        raise AssertionError(f"make dist failed ({done.returncode}):\n"
                             + (done.stdout + done.stderr)[-3000:])
    assert BINARY.is_file(), f"make dist did not write {BINARY}"
    return BINARY
