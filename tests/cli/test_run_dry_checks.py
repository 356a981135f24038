"""``run --dry-run`` checks everything ``run`` checks before it acts: each case is a node the
real run refuses, and the dry run must refuse it the same way (result, exit code, finding
codes), writing nothing. The dry run and the run share the checks (the preflight, the state
directory's check before the lock), so they cannot drift; these cases are the two that had:
a GPU reset command that is not on PATH (the run wrote its config, then failed at the reset)
and a read-only tree (the run could not take its lock; the dry run said it would start)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_json
from tests.runkit import sim


def registered(root: Path) -> None:
    """The simulated GPUs registered with the fabric, as a fabric manager that ran leaves them."""
    path = root / "var/lib/nvfabric-sim/gpus.json"
    data = json.loads(path.read_text())
    for gpu in data["gpus"]:
        gpu["state"] = "completed"
    path.write_text(json.dumps(data))


def outcome(out: dict[str, Any]) -> tuple[object, ...]:
    if "error" in out:
        return ("error", out["error"]["code"])
    return (out["result"], out["exit_code"], sorted(f["code"] for f in out["findings"]))


def test_a_reset_command_that_cannot_run_is_refused_by_the_dry_run_as_by_the_run(
        tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    registered(root)
    args = ("run", "--root", str(root), "--gpu-reset-command", "no-such-gpu-reset -r")
    dry, dry_rc = run_json(*args, "--dry-run")
    assert dry_rc == 1, dry
    assert dry["result"] == "refused"
    [f] = [f for f in dry["findings"] if f["code"] == "restart_needs_gpu_reset"]
    assert f["severity"] == "error" and "'no-such-gpu-reset' is not an executable" in f["message"]
    assert not (root / "run/nvfabric/fabricmanager.cfg").exists()
    real, real_rc = run_json(*args, timeout=120)
    assert (real_rc, outcome(real)) == (dry_rc, outcome(dry))
    assert not (root / "run/nvfabric/fabricmanager.cfg").exists()  # refused before writing


def test_a_reset_command_that_cannot_run_is_a_warning_while_no_reset_is_due(
        tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    dry, rc = run_json("run", "--root", str(root), "--gpu-reset-command", "no-such-gpu-reset",
                       "--dry-run")
    assert rc == 0 and dry["result"] == "would_start", dry
    [f] = [f for f in dry["findings"] if f["code"] == "restart_needs_gpu_reset"]
    assert f["severity"] == "warning"


#: Runs the dry run and the run on ROOT made read-only by a bind mount in a private mount
#: namespace (the mount never reaches the host); prints both JSON objects, one a line.
READ_ONLY = r"""
set -e
mount --bind "$1" "$1"
mount -o remount,bind,ro "$1"
shift
"$@" --dry-run --json | tr -d '\n'; echo
"$@" --json | tr -d '\n'; echo
"""


def test_a_read_only_tree_is_refused_by_the_dry_run_as_by_the_run(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.fail("this test makes a read-only bind mount: it needs root and unshare "
                    "(util-linux), as the CI machine has")
    root = sim(tmp_path, "dgx-b200")
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", READ_ONLY, "sh", str(root),
         sys.executable, "-m", "nvfabric", "run", "--root", str(root)],
        capture_output=True, text=True, timeout=120, check=False)
    lines = done.stdout.splitlines()
    assert len(lines) == 2, (done.stdout, done.stderr)
    dry, real = (json.loads(line) for line in lines)
    assert outcome(dry) == outcome(real) == ("error", "input_unreadable"), (dry, real)
    assert "Read-only file system" in dry["error"]["message"]
    assert "read-only filesystem" in dry["error"]["hint"]
    assert not (root / "run/nvfabric").exists()
