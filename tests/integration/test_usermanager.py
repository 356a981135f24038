"""The systemd live test's harness itself (tests/integration/usermanager.py): a test process
that dies without its ``finally:`` (a CI timeout's SIGTERM, a SIGKILL) must not leave the
user manager and the units it started running on the machine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.integration import usermanager
from tests.integration.usermanager import UserManager, remove_cgroup

CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from tests.integration.usermanager import UserManager
m = UserManager()
m.start()
(m.units / "sleeper.service").write_text("[Service]\nExecStart=/bin/sleep 300\n")
m.systemctl("daemon-reload")
m.systemctl("start", "sleeper.service")
print(m.pid, m.show("sleeper.service", "MainPID")["MainPID"], m.base, *m.cgroups, flush=True)
time.sleep(300)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_test_process_killed_outright_takes_its_user_manager_and_units_with_it() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(REPO)], stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout is not None
    manager = unit = 0
    cgroups: list[Path] = []
    try:
        manager_s, unit_s, base, *cg = child.stdout.readline().split()
        manager, unit, cgroups = int(manager_s), int(unit_s), [Path(c) for c in cg]
        assert alive(manager) and alive(unit)
        child.kill()  # no finally: runs in the child
        child.wait()
        deadline = time.monotonic() + 30
        while (alive(manager) or alive(unit)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(manager) and not alive(unit), "user manager outlived its test"
    finally:
        child.kill()
        child.wait()
        if manager and alive(manager):
            os.kill(manager, signal.SIGKILL)  # the manager this test started, by its pid
        for c in cgroups:
            remove_cgroup(c)
        if cgroups:
            subprocess.run(["rm", "-rf", "--", base], check=False)


def test_a_host_without_a_unified_cgroup_hierarchy_fails_in_one_line_leaving_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def no_unified() -> list[Path]:
        raise AssertionError("no unified cgroup hierarchy at /sys/fs/cgroup(/unified): the "
                             "systemd user manager cannot track its units")

    monkeypatch.setattr(usermanager, "cgroup_roots", no_unified)
    before = set(Path("/tmp").glob("nvf-sd-*"))
    with pytest.raises(AssertionError, match="no unified cgroup hierarchy"):
        UserManager()
    assert set(Path("/tmp").glob("nvf-sd-*")) == before
