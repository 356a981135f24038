"""The PyInstaller builds (nvfabric.effects.frozen): the environment their children get and the
dispatch of a simulated tree's launcher to its fake."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nvfabric.effects.frozen import FAKE_FLAG, child_environment, fake_target, unit_for_binary
from nvfabric.simulate import fakebin, fakes
from nvfabric.simulate.fakebin import state as fakestate
from tests import runkit


def test_children_get_the_callers_library_path_back() -> None:
    env = {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/tmp/_MEIabc:/opt/lib",
           "LD_LIBRARY_PATH_ORIG": "/opt/lib"}
    out = child_environment(env)
    assert out == {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/lib",
                   "PYINSTALLER_RESET_ENVIRONMENT": "1"}
    assert env["LD_LIBRARY_PATH"] == "/tmp/_MEIabc:/opt/lib"  # the input is not changed


def test_children_get_no_library_path_when_the_caller_had_none() -> None:
    out = child_environment({"LD_LIBRARY_PATH": "/tmp/_MEIabc", "HOME": "/root"})
    assert out == {"HOME": "/root", "PYINSTALLER_RESET_ENVIRONMENT": "1"}


def test_an_empty_original_library_path_stays_empty() -> None:
    out = child_environment({"LD_LIBRARY_PATH": "/tmp/_MEIabc", "LD_LIBRARY_PATH_ORIG": ""})
    assert out["LD_LIBRARY_PATH"] == ""


def test_a_launcher_reached_through_its_vendor_link_names_its_fake_and_root(
        tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/nvidia-imex").write_text("#!/x\n")
    (tmp_path / "usr/bin").mkdir(parents=True)
    os.symlink("../../bin/nvidia-imex", tmp_path / "usr/bin/nvidia-imex")
    assert fake_target(str(tmp_path / "usr/bin/nvidia-imex")) == (
        "nvidia-imex", str(tmp_path.resolve()))


def test_an_unknown_fake_is_exit_2_naming_the_known_ones(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert fakebin.main("nvidia-bogus", [], root="/nonexistent") == 2
    err = capsys.readouterr().err
    assert "unknown simulated program 'nvidia-bogus'" in err and "nvidia-imex-ctl" in err
    fakestate.ROOT = None


def test_frozen_launchers_name_the_binary_and_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/usr/bin/nvfabric")
    text = fakes._launcher("nvlsm")
    assert text.splitlines()[0] == f"#!/usr/bin/nvfabric {FAKE_FLAG}"


@pytest.mark.parametrize("path", ["/opt/my tools/nvfabric", "/" + "x" * 250])
def test_a_binary_path_that_no_shebang_can_hold_is_refused(
        monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    import sys

    from nvfabric.model.errors import NvfabricError

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", path)
    with pytest.raises(NvfabricError) as err:
        fakes._launcher("nvlsm")
    assert err.value.exit_code == 2 and "#! line" in str(err.value)


def test_the_binarys_unit_lets_its_child_notify_and_changes_nothing_else() -> None:
    from nvfabric.effects.unitfile import unit_text

    shipped = unit_text()  # not frozen here: exactly as shipped
    assert "\nNotifyAccess=main\n" in shipped
    adapted = unit_for_binary(shipped)
    assert "\nNotifyAccess=all\n" in adapted and "NotifyAccess=main" not in adapted
    removed = [ln for ln in shipped.splitlines() if ln not in adapted.splitlines()]
    added = [ln for ln in adapted.splitlines() if ln not in shipped.splitlines()]
    assert removed == ["NotifyAccess=main"]
    assert len(added) == 2 and added[0].startswith("# ") and added[1] == "NotifyAccess=all"
    assert unit_for_binary("[Service]\nNotifyAccess=exec\n") == "[Service]\nNotifyAccess=exec\n"


def test_unit_install_from_the_binary_writes_notify_access_all(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sys

    from nvfabric.effects.unitfile import unit_text

    (tmp_path / "usr/bin").mkdir(parents=True)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "usr/bin/nvfabric"))
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path / "tmp/_MEIabc123"), raising=False)
    assert "\nNotifyAccess=all\n" in unit_text()


def test_the_one_dir_build_keeps_the_unit_as_shipped(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # one process (its bootloader runs Python in place): READY=1 comes from the main pid
    import sys

    from nvfabric.effects.frozen import is_one_file
    from nvfabric.effects.unitfile import unit_text

    home = tmp_path / "usr/lib/nvfabric"
    (home / "_internal").mkdir(parents=True)
    (tmp_path / "usr/bin").mkdir()
    (home / "nvfabric").write_bytes(b"\x7fELF")
    os.symlink("../lib/nvfabric/nvfabric", tmp_path / "usr/bin/nvfabric")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(home / "_internal"), raising=False)
    for exe in (home / "nvfabric", tmp_path / "usr/bin/nvfabric"):  # also through its link
        monkeypatch.setattr(sys, "executable", str(exe))
        assert not is_one_file()
        assert "\nNotifyAccess=main\n" in unit_text()
    monkeypatch.delattr(sys, "frozen")
    assert not is_one_file()


def test_a_stand_in_daemon_laid_out_in_the_tree_finds_its_node(tmp_path: Path) -> None:
    # a fabric archive's launcher installed at a vendor path or under an install prefix
    from nvfabric.simulate.fakebin.state import STATE_DIR

    (tmp_path / STATE_DIR).mkdir(parents=True)
    (tmp_path / STATE_DIR / "node.json").write_text("{}")
    for rel in ("usr/bin/nv-fabricmanager", "opt/nvidia/nvlsm/sbin/nvlsm",
                "opt/nvfabric/fabricmanager-570.148.08/bin/nv-fabricmanager"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("#!/x\n")
        assert fake_target(str(tmp_path / rel)) == (os.path.basename(rel),
                                                     str(tmp_path.resolve()))


def test_same_executable_is_the_inode_of_proc_exe() -> None:
    # The bootloader's child asks for PR_SET_PDEATHSIG only when its parent is this binary.
    import sys

    from nvfabric.effects.frozen import same_executable

    assert same_executable(os.getpid())
    same = runkit.Child([sys.executable, "-c", "import time; time.sleep(30)"])
    other = runkit.Child(["sleep", "30"])
    try:
        assert same_executable(same.pid)
        assert not same_executable(other.pid)
    finally:
        for p in (same, other):
            p.close()
    assert not same_executable(other.pid)  # gone: unreadable is False


def test_the_lean_flag_is_the_supervisors() -> None:
    from nvfabric.effects.frozen import SUPERVISE_FLAG
    from nvfabric.supervisor.lean import FLAG

    assert SUPERVISE_FLAG == FLAG


# The bootloader's Python child, as a child of a process running the same executable (this
# interpreter standing for the bootloader); sys.frozen set as PyInstaller sets it.
_CHILD_WATCHDOG = ("import sys; sys.frozen = True; "
                   "from nvfabric.effects.notify import watchdog_usec; "
                   "from nvfabric.effects.frozen import bootloader_pid; "
                   "print(watchdog_usec(), bootloader_pid())")


@pytest.mark.parametrize("frozen", [True, False])
def test_the_binarys_child_keeps_the_watchdog_systemd_gave_the_bootloader(frozen: bool) -> None:
    # systemd sets WATCHDOG_PID to the main pid, the bootloader; the pings come from its
    # Python child, which must take the watchdog as its own (else the unit is killed at
    # WatchdogSec). Not frozen, a child never takes its parent's watchdog.
    import subprocess
    import sys

    code = _CHILD_WATCHDOG if frozen else _CHILD_WATCHDOG.replace("sys.frozen = True; ", "")
    env = {**os.environ, "WATCHDOG_USEC": "60000000", "WATCHDOG_PID": str(os.getpid())}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == (["60000000", str(os.getpid())] if frozen
                                   else ["None", "None"])


def test_a_frozen_child_of_another_program_takes_no_watchdog() -> None:
    # the parent is not the binary (sh here): not a bootloader, its watchdog is not ours
    import subprocess
    import sys

    env = {**os.environ, "WATCHDOG_USEC": "60000000"}
    done = subprocess.run(["sh", "-c", 'WATCHDOG_PID=$$ "$0" -c "$1"; :', sys.executable,
                           _CHILD_WATCHDOG], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "None"]
