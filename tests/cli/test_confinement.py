"""Issue 10, section 2: nothing nvfabric creates or reads leaves ``--root`` through a link in
the node tree (IMEX channel nodes, readers of sysfs/procfs), and a shipped config that is a
link to an unrelated file, or empty, is refused."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.test_run_mnnvl import tray
from tests.conftest import run_cli, run_json
from tests.runkit import events, sim

CHANNELS = "dev/nvidia-caps-imex-channels"


def _link_channels_out(root: Path, outside: Path) -> None:
    """The tray's channel directory replaced by a link to a directory outside the root."""
    for entry in (root / CHANNELS).iterdir():
        entry.unlink()
    (root / CHANNELS).rmdir()
    outside.mkdir()
    (root / CHANNELS).symlink_to(outside)


def test_channel_create_through_a_link_out_of_the_root_makes_nothing(
        tmp_path: Path, node: Callable[..., Path]) -> None:
    root = node("gb200-tray")
    outside = tmp_path / "elsewhere"
    _link_channels_out(root, outside)
    for args in ((), ("--json",)):
        proc = run_cli("imex", "channel", "--root", str(root), "--create", "0", *args)
        assert proc.returncode == 2, proc.stderr
        assert list(outside.iterdir()) == []
    out, rc = run_json("imex", "channel", "--root", str(root), "--create", "0")
    assert rc == 2 and out["error"]["code"] == "input_unreadable"
    assert f"outside the root {root}" in out["error"]["message"]
    assert "remove that link" in out["error"]["hint"]


def test_channel_create_prints_the_path_under_the_root(node: Callable[..., Path]) -> None:
    root = node("gb200-tray")
    (root / CHANNELS / "channel0").unlink()
    out, rc = run_json("imex", "channel", "--root", str(root), "--create", "0")
    assert (rc, out["created"]) == (0, f"{root}/{CHANNELS}/channel0")
    proc = run_cli("imex", "channel", "--root", str(root), "--create", "0")
    assert f"{root}/{CHANNELS}/channel0 exists already" in proc.stdout


def test_run_on_a_tray_does_not_make_its_channel_through_a_link(tmp_path: Path) -> None:
    root = tray(tmp_path)
    outside = tmp_path / "elsewhere"
    _link_channels_out(root, outside)
    for args in (("--dry-run",), ()):
        proc = run_cli("run", "--root", str(root), *args)
        assert proc.returncode == 2, proc.stderr
        assert "IMEX channel '/dev/nvidia-caps-imex-channels/channel0' resolves to" in \
            proc.stderr
        assert list(outside.iterdir()) == []
    assert not events(root, "imex", "exec")
    assert not (root / "run/nvfabric/imex/config.cfg").exists()


def test_run_on_a_tray_logs_the_channel_it_made_under_the_root(tmp_path: Path,
                                                              start: Callable[..., object]
                                                              ) -> None:
    from tests.runkit import Run

    root = tray(tmp_path, channel0="file")
    run = start(root)
    assert isinstance(run, Run)
    line = run.wait_line(r"created IMEX channel")
    assert f"created IMEX channel {root}/{CHANNELS}/channel0 (c 234,0" in line
    run.wait_line(r"fabric ready in")
    run.signal()
    assert run.wait() == 0


# ---------------------------------------------------------------- readers stay under the root


def test_driver_version_linked_out_of_the_root_is_not_read(tmp_path: Path,
                                                           node: Callable[..., Path]) -> None:
    root = node("hgx-h100")
    before, rc = run_json("plan", "--root", str(root))
    assert rc == 0
    outside = tmp_path / "version"
    outside.write_text("999.99.99\n")
    version = root / "sys/module/nvidia/version"
    version.unlink()
    version.symlink_to(outside)
    after, _ = run_json("plan", "--root", str(root))
    assert after["driver_version"] != "999.99.99"
    assert after["driver_version"] == before["driver_version"]  # /proc/driver/nvidia/version
    # an absolute link that stays inside the root is followed, as under / it would be
    inside = root / "opt/version"
    inside.parent.mkdir()
    inside.write_text("570.133.21\n")
    version.unlink()
    version.symlink_to(f"{root}/opt/version")
    linked, _ = run_json("plan", "--root", str(root))
    assert linked["driver_version"] == "570.133.21"


def test_sysfs_relative_links_inside_the_tree_keep_working(node: Callable[..., Path]) -> None:
    root = node("dgx-b200")
    ports = root / "sys/class/infiniband"
    assert any(p.is_symlink() for p in ports.iterdir())  # the simulator's sysfs shape
    out, rc = run_json("detect", "--root", str(root))
    assert rc == 0
    assert len(out["infiniband"]) >= 1 and len(out["gpus"]) == 8


def test_under_refuses_a_path_whose_links_leave_the_root(tmp_path: Path) -> None:
    from nvfabric.facts.fs import read_text
    from nvfabric.model.hostpath import under

    root = tmp_path / "root"
    (root / "sys/a").mkdir(parents=True)
    (tmp_path / "secret").write_text("outside\n")
    (root / "sys/a/rel").symlink_to("../../../secret")
    (root / "sys/a/abs").symlink_to(tmp_path / "secret")
    (root / "sys/a/ok").symlink_to("../b")
    (root / "sys/b").write_text("inside\n")
    assert read_text(under(str(root), "/sys/a/rel")) is None
    assert read_text(under(str(root), "/sys/a/abs")) is None
    assert read_text(under(str(root), "/sys/a/ok")) == "inside"
    assert under("/", "/sys/a") == "/sys/a"  # the host itself: nothing to confine


# ---------------------------------------------------------------- the shipped fabricmanager.cfg


def test_shipped_config_that_is_a_link_to_an_unrelated_file_is_refused(
        tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    cfg = root / "usr/share/nvidia/nvswitch/fabricmanager.cfg"
    unrelated = tmp_path / "passwd"
    unrelated.write_text("root:x:0:0:root:/root:/bin/bash\n")
    inside = root / "etc/passwd"
    inside.parent.mkdir(exist_ok=True)
    inside.write_text(unrelated.read_text())
    cfg.unlink()
    # a link out of the root: the vendor file is missing from the node (R08: exit 1, the
    # finding names where the link leads); a link to another file of the tree: not the
    # vendor's file (exit 2). Neither is copied or printed.
    for target, code, words in ((unrelated, 1, "link leading out of the root"),
                                (Path("../../../../etc/passwd"), 2, "is a symbolic link")):
        cfg.unlink(missing_ok=True)
        cfg.symlink_to(target)
        for args in (("--dry-run",), ("--dry-run", "--json"), ()):
            proc = run_cli("run", "--root", str(root), *args)
            assert proc.returncode == code, proc.stderr
            assert "root:x:0:0" not in proc.stdout + proc.stderr
            assert words in proc.stdout + proc.stderr
    assert not events(root, "fabricmanager", "exec")


def test_empty_shipped_config_is_refused(tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    cfg = root / "usr/share/nvidia/nvswitch/fabricmanager.cfg"
    cfg.write_text("")
    out, rc = run_json("run", "--root", str(root), "--dry-run")
    assert rc == 2
    assert out["error"]["code"] == "input_unreadable"
    assert "is empty" in out["error"]["message"] and str(cfg) in out["error"]["message"]
    assert not os.path.exists(root / "run/nvfabric/fabricmanager.cfg")


# ---------------------------------------------------------------- keys fabric manager knows


def test_unknown_fm_set_key_is_refused_with_the_nearest_known_key(tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    out, rc = run_json("run", "--root", str(root), "--dry-run", "--fm-set", "LOG_LEVLE=2")
    assert rc == 2
    err = out["error"]
    assert (err["code"], err["key"], err["nearest"]) == ("config_invalid_value", "LOG_LEVLE",
                                                         "LOG_LEVEL")
    assert "--fm-set LOG_LEVLE" in err["message"] and "did you mean LOG_LEVEL?" in err["hint"]
    assert not (root / "run/nvfabric/fabricmanager.cfg").exists()


@pytest.mark.parametrize("typed", ["log_level", "Log_Levle"])
def test_a_key_in_the_wrong_case_is_told_the_known_key(tmp_path: Path, typed: str) -> None:
    """Fabric manager's keys are upper case (and it matches them exactly): `log_level=2` is
    refused, and the hint names LOG_LEVEL (difflib alone found no key near the lower case)."""
    root = sim(tmp_path, "hgx-h100")
    out, rc = run_json("run", "--root", str(root), "--dry-run", "--fm-set", f"{typed}=2")
    assert rc == 2
    err = out["error"]
    assert (err["code"], err["key"], err["nearest"]) == ("config_invalid_value", typed,
                                                         "LOG_LEVEL")
    assert "did you mean LOG_LEVEL?" in err["hint"]


def test_unknown_key_from_the_environment_is_refused(tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    proc = run_cli("run", "--root", str(root), "--dry-run",
                   env={"NVFM_CONFIG_LOGLEVEL": "3"})
    assert proc.returncode == 2
    assert "NVFM_CONFIG_LOGLEVEL" in proc.stderr and "did you mean LOG_LEVEL?" in proc.stderr


def test_the_shipped_files_keys_are_the_reference() -> None:
    from nvfabric.bringup import fmconfig as fmcfg
    from nvfabric.model import fmkeys
    from tests.cases import CORPUS

    bottlerocket = (CORPUS / "configs/bottlerocket-nvidia-fabricmanager.cfg").read_text()
    full = (CORPUS / "configs/fabricmanager-535.216.01.cfg").read_text()
    # LOG_FILE_MAX_SIZE is a key of the 535 file, not of Bottlerocket's trimmed one
    fmcfg.effective(full, sets={"LOG_FILE_MAX_SIZE": "1024", "LOG_LEVEL": "2"})
    fmcfg.effective(bottlerocket, sets={"LOG_LEVEL": "2", "FABRIC_MODE": "1"})
    try:
        fmcfg.effective(bottlerocket, sets={"LOG_FILE_MAX_SIZE": "1024"})
    except fmkeys.ConfigError as err:
        assert err.finding.fields["key"] == "LOG_FILE_MAX_SIZE"
    else:
        raise AssertionError("a key the shipped file does not list was accepted")


def test_fetch_default_cache_through_a_link_out_of_the_root_is_refused(
        tmp_path: Path, node: Callable[..., Path]) -> None:
    root = node("hgx-h100")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (root / "var").mkdir(exist_ok=True)
    (root / "var/cache").symlink_to(outside)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for command in ("fetch", "install"):
        out, rc = run_json(command, "--root", str(root), "--mirror", str(mirror))
        assert rc == 2, out
        assert "--dest (default)" in out["error"]["message"]
        assert "outside the root" in out["error"]["message"]
    assert list(outside.iterdir()) == []


def test_a_channel_node_that_is_itself_a_link_out_is_named_so(
        tmp_path: Path, node: Callable[..., Path]) -> None:
    """channel1 a dangling link to a file outside the root: refused (nothing made there), and
    the hint no longer blames 'the channel directory', which is a plain directory here."""
    root = node("gb200-tray")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (root / CHANNELS / "channel1").symlink_to(outside / "f")
    out, rc = run_json("imex", "channel", "--root", str(root), "--create", "1")
    assert rc == 2 and out["error"]["code"] == "input_unreadable"
    assert f"resolves to {outside}/f, outside the root {root}" in out["error"]["message"]
    assert "the channel node itself" in out["error"]["hint"]
    assert list(outside.iterdir()) == []
