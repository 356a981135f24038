"""nvfabric.service under a real systemd service manager (tests/integration/usermanager.py:
``systemd --user`` in a private mount namespace, its own cgroup), pointed at a simulated DGX
B200 (``nvfabric simulate dgx-b200 DIR``; fake NVLSM and fabric manager as real processes).

The unit is exactly what ``nvfabric unit install`` writes (the watchdog test also runs the
single-file binary with the unit it writes, and the Debian package's files, its directory
build and its unit, as installed); a drop-in changes ExecStart
(``--root DIR`` and, for the restart, the simulated node's GPU reset command), sends
stdout/stderr to a file (there is no journald in the test's namespace), and, only when the
test's Python lives in a home directory (see PROTECT_HOME), makes ProtectHome= read-only; the
watchdog test also shortens WatchdogSec=. Every other directive, the sandboxing included,
applies as shipped. Figures (start to READY, stop) are printed (``pytest -s``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvfabric.simulate.fakes import calls
from tests.conftest import REPO, run_cli
from tests.integration.debroot import require
from tests.integration.distbin import binary_install, deb_install
from tests.integration.usermanager import NVFABRIC, UNIT, Node, UserManager, venv_install
from tests.runkit import alive


@pytest.fixture(scope="module")
def manager() -> Iterator[UserManager]:
    m = UserManager()
    try:
        m.start()
        yield m
    finally:
        m.stop()


def wait_for(predicate: object, what: str, bound_s: float = 60.0) -> None:
    deadline = time.monotonic() + bound_s
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"after {bound_s} s still not: {what}")
        time.sleep(0.05)


@pytest.fixture
def node(manager: UserManager, tmp_path: Path) -> Iterator[Node]:
    n = Node(manager, tmp_path)
    try:
        yield n
    finally:
        n.cleanup()


def service_pids(ready: dict[str, object]) -> dict[str, int]:
    services = ready["services"]
    assert isinstance(services, list)
    return {s["service"]: s["pid"] for s in services}


def test_unit_verifies_clean_and_its_security_score_is_the_readme_s(tmp_path: Path) -> None:
    require("systemd-analyze")
    root = tmp_path / "root"
    root.mkdir()
    proc = run_cli("unit", "install", "--root", str(root))
    assert proc.returncode == 0, proc.stderr
    # what verify needs besides the unit: the command it runs and systemd's own units
    (root / "usr/bin").mkdir(parents=True)
    shutil.copy(NVFABRIC, root / "usr/bin/nvfabric")
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    verify = subprocess.run(["systemd-analyze", "verify", f"--root={root}", UNIT],
                            capture_output=True, text=True, timeout=60, check=False)
    assert (verify.returncode, verify.stderr, verify.stdout) == (0, "", "")
    security = subprocess.run(["systemd-analyze", "security", "--offline=true", f"--root={root}",
                               UNIT], capture_output=True, text=True, timeout=60, check=False)
    assert security.stderr == ""
    m = re.search(r"Overall exposure level for nvfabric\.service: (\d+\.\d) (\w+)",
                  security.stdout)
    assert m, security.stdout
    readme = (REPO / "docs" / "running" / "systemd.md").read_text()
    assert f"`systemd-analyze security --offline=true`: **{m[1]} {m[2]}**" in readme
    print(f"\nsystemd-analyze security --offline=true: {m[1]} {m[2]}")


def test_start_returns_after_ready_and_stop_stops_fabric_manager_then_nvlsm(
        node: Node) -> None:
    took = node.start()
    # systemctl start returned: READY=1 came, so the fabric is up
    p = node.props("ActiveState", "SubState", "StatusText", "MainPID", "Type", "NotifyAccess",
                   "WatchdogUSec")
    assert (p["ActiveState"], p["SubState"], p["Type"], p["NotifyAccess"]) == (
        "active", "running", "notify", "main")
    assert p["WatchdogUSec"] == "1min" and p["StatusText"].startswith("fabric ready in ")
    ready = node.ready()
    assert node.gpu_states() == {"completed"}
    pids = service_pids(ready)
    assert set(pids) == {"nvlsm", "fabricmanager"}
    in_unit = set(node.m.unit_pids(UNIT))
    assert {int(p["MainPID"]), *pids.values()} <= in_unit
    text = node.text()
    assert "READY=1 sent to $NOTIFY_SOCKET" in text
    stop_took = node.stop()
    assert node.props("ActiveState", "Result") == {"ActiveState": "inactive",
                                                   "Result": "success"}
    assert not any(alive(pid) for pid in pids.values())
    assert node.m.unit_pids(UNIT) == []
    text = node.text()
    order = [f"stopping fabricmanager (pid {pids['fabricmanager']})",
             "nvfabric: fabricmanager stopped", f"stopping nvlsm (pid {pids['nvlsm']})",
             "nvfabric: nvlsm stopped", "nvfabric: all services stopped"]
    at = [text.find(s) for s in order]
    assert -1 not in at and at == sorted(at), (at, text[-3000:])
    print(f"\nsystemctl start -> returned after READY=1: {took:.2f} s "
          f"(nvfabric's own ready_after_s {ready['ready_after_s']}); "
          f"systemctl stop: {stop_took:.2f} s")


def test_killing_nvlsm_restarts_the_unit_per_its_policy(node: Node) -> None:
    node.start()
    first = node.props("MainPID", "NRestarts")
    assert first["NRestarts"] == "0"
    pids = service_pids(node.ready())
    killed = time.perf_counter()
    os.kill(pids["nvlsm"], signal.SIGKILL)

    def restarted() -> bool:
        p = node.props("ActiveState", "SubState", "MainPID", "NRestarts")
        return (p["NRestarts"] == "1" and p["ActiveState"] == "active"
                and p["SubState"] == "running" and p["MainPID"] != first["MainPID"])

    wait_for(restarted, "unit restarted and running again")
    back = time.perf_counter() - killed
    assert not alive(int(first["MainPID"])) and not alive(pids["fabricmanager"])
    new = service_pids(node.ready())
    assert new["nvlsm"] != pids["nvlsm"] and node.gpu_states() == {"completed"}
    text = node.text()
    # the first run: nvlsm's death is the unit's failure (fabric manager stopped with it)
    assert re.search(r"error service_exited: nvlsm \(pid \d+\) killed by SIGKILL", text)
    # the second run (systemd's restart): R04, GPUs registered -> the reset runs first
    assert text.index("error service_exited") < text.index("resetting GPUs before starting")
    resets = [c for c in calls(str(node.root)) if (c["prog"], c["event"]) == ("nvidia-smi",
                                                                              "reset")]
    assert len(resets) == 1 and "error restart_needs_gpu_reset" not in text
    assert "info restart_needs_gpu_reset: GPUs are already registered" in text
    print(f"\nnvlsm SIGKILLed -> unit running again (RestartSec=5s included): {back:.1f} s")
    node.stop()


INSTALLS = {"venv": venv_install, "binary": binary_install, "deb": deb_install}


@pytest.mark.parametrize("how", list(INSTALLS))
def test_a_supervisor_that_stops_pinging_is_killed_by_the_watchdog(
        manager: UserManager, tmp_path: Path, how: str) -> None:
    # As each installation runs it: the venv's entry point, the single-file binary with the unit
    # its `unit install` writes, the Debian package's files (the directory build, the unit as
    # shipped). The venv's and the package's supervisor is the main pid (WATCHDOG_PID: one
    # process, exec'd into the lean supervisor); the single-file binary's main pid is
    # PyInstaller's bootloader and the pings come from its Python child. The ready file's pid
    # (the supervisor) is the process that stops pinging here.
    # WatchdogSec=5s instead of the shipped 60 s, so that the test takes seconds, not minutes
    node = Node(manager, tmp_path, extra="WatchdogSec=5s\n", install=INSTALLS[how](tmp_path))
    try:
        node.start()
        first = node.props("MainPID", "WatchdogUSec")
        assert first["WatchdogUSec"] == "5s"
        ready = node.ready()
        pids = service_pids(ready)
        supervisor = ready["pid"]
        assert isinstance(supervisor, int)
        assert (supervisor == int(first["MainPID"])) is (how != "binary")
        time.sleep(12)  # more than two intervals: the loop's pings keep it alive
        p = node.props("MainPID", "NRestarts", "ActiveState")
        assert p == {"MainPID": first["MainPID"], "NRestarts": "0", "ActiveState": "active"}, \
            node.text()[-3000:]
        main = int(first["MainPID"])
        stopped = time.perf_counter()
        os.kill(supervisor, signal.SIGSTOP)  # the loop stops turning: no more WATCHDOG=1

        seen: set[tuple[str, str]] = set()

        def restarted() -> bool:
            q = node.props("NRestarts", "ActiveState", "SubState", "Result", "MainPID")
            seen.add((q["SubState"], q["Result"]))
            return q["NRestarts"] == "1" and q["ActiveState"] == "active" and \
                q["MainPID"] != first["MainPID"]

        wait_for(restarted, "watchdog killed the stopped supervisor and the unit restarted", 90)
        took = time.perf_counter() - stopped
        assert not alive(main) and not alive(supervisor)
        assert not any(alive(pid) for pid in pids.values())
        assert took >= 5.0  # not before the watchdog interval passed
        # why systemd stopped it: the watchdog (Result=watchdog while it stopped the unit:
        # SIGABRT to the main process, SIGKILL to the rest, then the restart's wait)
        assert {r for sub, r in seen if sub != "running"} >= {"watchdog"}, seen
        print(f"\n{how}: supervisor SIGSTOPped -> killed by the watchdog and running again: "
              f"{took:.1f} s")
    finally:
        node.cleanup()


def test_on_a_node_with_nothing_to_manage_the_start_succeeds_and_the_unit_ends(
        manager: UserManager, tmp_path: Path) -> None:
    # H100 PCIe: fabric none. nvfabric exits 0 at once; READY=1 first, or systemd would call
    # it a failed start (result 'protocol') and an enabled unit would be red on every such node
    node = Node(manager, tmp_path, profile="h100-pcie")
    try:
        node.start()
        wait_for(lambda: node.props("ActiveState")["ActiveState"] == "inactive",
                 "unit ended after starting nothing")
        # (systemctl start returned 0: READY=1 came; StatusText is cleared once inactive)
        assert node.props("Result", "NRestarts", "ExecMainStatus") == {
            "Result": "success", "NRestarts": "0", "ExecMainStatus": "0"}
        assert "fabric none: nothing to start" in node.text()
    finally:
        node.cleanup()
