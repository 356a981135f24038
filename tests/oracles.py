"""Real Debian tools as oracles (lspci from pciutils, ibstat from infiniband-diags).

CI installs them (.ci/run), so there a missing tool fails the test; on a developer machine
without them the oracle tests are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests import runkit


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is not installed; .ci/run must install it")
        pytest.skip(f"{tool} not installed (apt-get install pciutils infiniband-diags)")
    return path


def lspci_vvv(root: str, slot: str) -> str:
    """``lspci -vvv`` of one function of a node tree, through the sysfs back end."""
    lspci = need("lspci")
    proc = runkit.run([lspci, "-vvv", "-A", "linux-sysfs", "-O", f"sysfs.path={root}/sys/bus/pci",
                       "-s", slot],
                      check=True)
    return proc.stdout


def ibstat(root: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``ibstat ARGS`` with ROOT/sys bind-mounted on /sys in a private mount namespace."""
    ib = need("ibstat")
    need("unshare")
    unshare = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    script = 'mount --bind "$1/sys" /sys && shift && exec "$@"'
    return runkit.run([*unshare, "sh", "-c", script, "sh", root, ib, *args])


def vpd_block(lspci_text: str) -> list[str]:
    """The lines of the "Vital Product Data" capability, stripped, through "End"."""
    out: list[str] = []
    inside = False
    for line in lspci_text.splitlines():
        if "Vital Product Data" in line:
            inside = True
            continue
        if inside:
            out.append(line.strip())
            if line.strip() in ("End", "Not readable") or line.strip().startswith("Capabilities:"):
                break
    return out
