"""The single-file binary's entry (nvfabric.frozen): the environment its children get and the
dispatch of a simulated tree's launcher to its fake."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nvfabric.frozen import FAKE_FLAG, child_environment, fake_target, unit_for_binary
from nvfabric.simulate import fakebin, fakes
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
    fakebin.state.ROOT = None


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
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from nvfabric.effects.unitfile import unit_text

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert "\nNotifyAccess=all\n" in unit_text()


def test_same_executable_is_the_inode_of_proc_exe() -> None:
    # The bootloader's child asks for PR_SET_PDEATHSIG only when its parent is this binary.
    import sys

    from nvfabric.frozen import same_executable

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
