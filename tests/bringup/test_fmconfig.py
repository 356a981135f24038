"""The effective fabricmanager.cfg: shipped files from tests/data/corpus/configs, overrides,
validation, path preflight (case D06), and atomic writes that survive being killed."""

from __future__ import annotations

import os
import signal
import stat
import sys
from pathlib import Path

import pytest
import yaml

from nvfabric.bringup import fmconfig as fmcfg
from nvfabric.bringup.prepared import Prepared
from nvfabric.bringup.spec import PlannedFile
from nvfabric.effects.apply import apply
from nvfabric.effects.atomic import write_atomic
from nvfabric.facts.fmconfig import check_paths
from nvfabric.model import fmkeys
from nvfabric.model.hostpath import under
from tests import runkit
from tests.cases import CASES, CORPUS
from tests.conftest import run_cli

SHIPPED_535 = (CORPUS / "configs/fabricmanager-535.216.01.cfg").read_text(encoding="utf-8")
BOTTLEROCKET = (CORPUS / "configs/bottlerocket-nvidia-fabricmanager.cfg").read_text(
    encoding="utf-8")
GUID = "0xe09d730300e400e8"


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    old, new = before.splitlines(), after.splitlines()
    return [(a, b) for a, b in zip(old, new, strict=False) if a != b]


def test_shipped_535_cfg_keeps_comments_and_order_only_daemonize_changes() -> None:
    eff = fmcfg.effective(SHIPPED_535)
    assert changed_lines(SHIPPED_535, eff.text) == [("DAEMONIZE=1", "DAEMONIZE=0")]
    assert len(eff.text.splitlines()) == len(SHIPPED_535.splitlines())


def test_nvlink5_guid_is_added_after_the_shipped_keys() -> None:
    eff = fmcfg.effective(SHIPPED_535, guid=GUID)
    tail = eff.text.splitlines()[-2:]
    assert tail == ["# Added by nvfabric", f"FM_SM_MGMT_PORT_GUID={GUID}"]
    assert eff.get("FM_SM_MGMT_PORT_GUID") == GUID


def test_bottlerocket_cfg_with_empty_log_file_is_left_alone(tmp_path: Path) -> None:
    assert fmcfg.effective(BOTTLEROCKET).text.rstrip("\n") == BOTTLEROCKET.rstrip("\n")
    (tmp_path / "usr/share/nvidia/tesla/nvswitch").mkdir(parents=True)
    eff = fmcfg.effective(BOTTLEROCKET, root=str(tmp_path))
    assert eff.get("LOG_FILE_NAME") == ""  # the console: nothing to check
    assert eff.get("UNIX_SOCKET_PATH") == f"{tmp_path}/run/nvidia/fabricmanager.sock"
    assert check_paths(eff) == []


def test_operator_overrides_env_then_fm_set_then_fabric_mode() -> None:
    environ = {"NVFM_CONFIG_LOG_LEVEL": "2", "NVFM_CONFIG_FABRIC_MODE": "2", "PATH": "/bin"}
    eff = fmcfg.effective(SHIPPED_535, environ=environ, sets={"LOG_LEVEL": "1"},
                          fabric_mode="1")
    assert (eff.get("LOG_LEVEL"), eff.get("FABRIC_MODE")) == ("1", "1")
    eff = fmcfg.effective(SHIPPED_535, environ=environ)
    assert (eff.get("LOG_LEVEL"), eff.get("FABRIC_MODE")) == ("2", "2")


def test_fabric_mode_option_and_a_different_fm_set_fabric_mode_are_refused() -> None:
    with pytest.raises(fmkeys.ConfigError) as err:
        fmcfg.effective(SHIPPED_535, sets={"FABRIC_MODE": "1"}, fabric_mode="2")
    finding = err.value.finding
    assert (finding.code, finding.fields["key"]) == ("config_invalid_value", "FABRIC_MODE")
    assert "--fabric-mode 2 and --fm-set FABRIC_MODE=1 disagree" in finding.message
    # the same value twice says one thing
    same = fmcfg.effective(SHIPPED_535, sets={"FABRIC_MODE": "1"}, fabric_mode="1")
    assert same.get("FABRIC_MODE") == "1"


@pytest.mark.parametrize("key", ["DAEMONIZE", "FM_SM_MGMT_PORT_GUID"])
def test_keys_nvfabric_owns_cannot_be_overridden(key: str) -> None:
    with pytest.raises(fmkeys.ConfigError) as err:
        fmcfg.effective(SHIPPED_535, sets={key: "1"})
    assert err.value.finding.code == "config_invalid_value"
    assert err.value.finding.fields["key"] == key
    with pytest.raises(fmkeys.ConfigError):
        fmcfg.effective(SHIPPED_535, environ={f"NVFM_CONFIG_{key}": "1"})


@pytest.mark.parametrize("key,value", [
    ("LOG_LEVEL", "4\nDAEMONIZE=1"),        # a newline would inject a second key
    ("FABRIC_MODE", "3"),
    ("FM_CMD_PORT_NUMBER", "70000"),
    ("TOPOLOGY_FILE_PATH", "usr/share/nvidia/nvswitch"),
    ("LOG_FILE_NAME", "/var/log/fm\x00.log"),
])
def test_bad_values_are_refused_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(fmkeys.ConfigError) as err:
        fmcfg.effective(SHIPPED_535, sets={key: value})
    assert err.value.finding.fields["key"] == key


def test_bad_guid_is_refused() -> None:
    with pytest.raises(fmkeys.ConfigError) as err:
        fmcfg.effective(SHIPPED_535, guid="0xe09d7303")
    assert err.value.finding.fields["key"] == "FM_SM_MGMT_PORT_GUID"


@pytest.mark.parametrize("arg", ["LOG_LEVEL", "=3", "1BAD=2"])
def test_malformed_fm_set_is_refused(arg: str) -> None:
    with pytest.raises(fmkeys.ConfigError):
        fmcfg.parse_sets([arg])


def test_paths_are_resolved_under_a_simulated_root() -> None:
    eff = fmcfg.effective(SHIPPED_535, root="/sim")
    assert eff.get("TOPOLOGY_FILE_PATH") == "/sim/usr/share/nvidia/nvswitch"
    assert eff.get("LOG_FILE_NAME") == "/sim/var/log/fabricmanager.log"
    assert eff.get("UNIX_SOCKET_PATH") == ""  # unset stays unset
    assert fmcfg.effective(SHIPPED_535, root="/").get("TOPOLOGY_FILE_PATH") == (
        "/usr/share/nvidia/nvswitch")


@pytest.mark.parametrize("source", ["fm-set", "environment", "shipped"])
@pytest.mark.parametrize("value", ["/../../../x", "/var/log/../../../../etc/x", "/a/.."])
def test_path_value_with_dotdot_is_refused_wherever_it_comes_from(source: str,
                                                                   value: str) -> None:
    # --state-dir refuses '..'; a path key of the effective config may not climb out of the
    # root either (it would on a simulated root: /sim/../../../x).
    kw: dict[str, object] = {
        "fm-set": {"sets": {"LOG_FILE_NAME": value}},
        "environment": {"environ": {"NVFM_CONFIG_LOG_FILE_NAME": value}},
        "shipped": {}}[source]
    shipped = SHIPPED_535.replace("LOG_FILE_NAME=/var/log/fabricmanager.log",
                                  f"LOG_FILE_NAME={value}") if source == "shipped" \
        else SHIPPED_535
    with pytest.raises(fmkeys.ConfigError) as err:
        fmcfg.effective(shipped, root="/sim", **kw)  # type: ignore[arg-type]
    assert err.value.finding.fields["key"] == "LOG_FILE_NAME"
    assert "'..'" in err.value.finding.message


@pytest.mark.parametrize("path", ["/../x", "/a/../../x", "/..", "/a/b/../../../etc"])
def test_under_never_leaves_the_root(path: str) -> None:
    with pytest.raises(ValueError, match=r"'\.\.'"):
        under("/sim", path)
    assert under("/sim", "/a/./b//c") == "/sim/a/b/c"


def test_every_resolved_path_key_lies_under_the_root() -> None:
    eff = fmcfg.effective(SHIPPED_535, root="/sim", sets={
        "STATE_FILE_NAME": "/run/x.state", "FM_CMD_UNIX_SOCKET_PATH": "//run//fm.sock"})
    values = [eff.get(k) for k in fmkeys.PATH_KEYS]
    assert [v for v in values if v and not v.startswith("/sim/")] == []


def test_d06_missing_node_config_file_names_the_key(tmp_path: Path) -> None:
    case = yaml.safe_load((CASES / "D06-config-invalid-value.yaml").read_text(encoding="utf-8"))
    key = case["expect"]["findings"][0]["key"]
    (tmp_path / "usr/share/nvidia/nvswitch").mkdir(parents=True)
    eff = fmcfg.effective(SHIPPED_535, root=str(tmp_path), sets={key: "/etc/nvidia/node.cfg"})
    problems = check_paths(eff)
    assert [(f.code, f.fields["key"]) for f in problems] == [("config_invalid_value", key)]
    (tmp_path / "etc/nvidia").mkdir(parents=True)
    (tmp_path / "etc/nvidia/node.cfg").write_text("", encoding="utf-8")
    assert check_paths(eff) == []


def test_path_preflight_dirs_and_parents(tmp_path: Path) -> None:
    (tmp_path / "var").write_text("a file where a directory should be", encoding="utf-8")
    eff = fmcfg.effective(SHIPPED_535, root=str(tmp_path))
    keys = sorted(f.fields["key"] for f in check_paths(eff))
    # topology/database directories missing; the log's directory sits under a regular file;
    # STATE_FILE_NAME's /tmp can be created under the root.
    assert keys == ["DATABASE_PATH", "LOG_FILE_NAME", "TOPOLOGY_FILE_PATH"]


def test_write_goes_to_the_state_dir_and_never_touches_the_shipped_file(tmp_path: Path) -> None:
    shipped = tmp_path / "usr/share/nvidia/nvswitch/fabricmanager.cfg"
    shipped.parent.mkdir(parents=True)
    shipped.write_text(SHIPPED_535, encoding="utf-8")
    before = shipped.stat()
    eff = fmcfg.effective(shipped.read_text(encoding="utf-8"), root=str(tmp_path), guid=GUID)
    target = tmp_path / "run/nvfabric/fabricmanager.cfg"
    said: list[str] = []  # the one applier of run (effects/apply.py) writes it
    apply(Prepared("nvswitch", files=(PlannedFile(str(target), eff.text),)), str(tmp_path),
          said.append)
    assert said == [f"wrote {target}"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert target.read_text(encoding="utf-8") == eff.text
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o700
    assert shipped.read_text(encoding="utf-8") == SHIPPED_535
    assert shipped.stat().st_mtime_ns == before.st_mtime_ns


def test_write_atomic_never_widens_an_existing_directory(tmp_path: Path) -> None:
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    os.chmod(directory, 0o700)
    write_atomic(str(directory / "x.cfg"), "A=1\n", dir_mode=0o755)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_write_atomic_replaces_a_link_at_the_backup_name_never_writes_through_it(
        tmp_path: Path) -> None:
    # a node tree (--root) whose x.cfg.nvfabric.bak links to a file outside the tree
    outside = tmp_path / "outside"
    outside.write_text("precious\n")
    target = tmp_path / "root" / "x.cfg"
    target.parent.mkdir()
    target.write_text("OLD=1\n")
    os.chmod(target, 0o600)
    backup = Path(str(target) + ".nvfabric.bak")
    backup.symlink_to(outside)
    write_atomic(str(target), "NEW=1\n")
    assert outside.read_text() == "precious\n"
    assert not backup.is_symlink() and backup.read_text() == "OLD=1\n"
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert target.read_text() == "NEW=1\n"


def test_write_atomic_with_a_directory_at_the_backup_name_fails_and_changes_nothing(
        tmp_path: Path) -> None:
    target = tmp_path / "x.cfg"
    target.write_text("OLD=1\n")
    Path(str(target) + ".nvfabric.bak").mkdir()
    with pytest.raises(OSError):
        write_atomic(str(target), "NEW=1\n")
    assert target.read_text() == "OLD=1\n"
    assert os.listdir(str(target) + ".nvfabric.bak") == []
    assert sorted(os.listdir(tmp_path)) == ["x.cfg", "x.cfg.nvfabric.bak"]


_KILL_IN_FSYNC = """
import os, signal, sys
import nvfabric.effects.atomic as atomic
def die(fd):
    os.kill(os.getpid(), signal.SIGKILL)
os.fsync = die
atomic.write_atomic(sys.argv[1], "NEW=1\\n" * 200000)
"""

_WRITE_LOOP = """
import sys
from nvfabric.effects.atomic import write_atomic
from nvfabric.model.hostpath import under
sys.stdout.write("go\\n"); sys.stdout.flush()
while True:
    write_atomic(sys.argv[1], "NEW=1\\n" * 200000, backup=False)
"""


def test_atomic_write_killed_before_the_rename_leaves_the_previous_file(tmp_path: Path) -> None:
    target = tmp_path / "fabricmanager.cfg"
    target.write_text("OLD=1\n", encoding="utf-8")
    proc = runkit.run([sys.executable, "-c", _KILL_IN_FSYNC, str(target)], text=False)
    assert proc.returncode == -signal.SIGKILL
    assert target.read_text(encoding="utf-8") == "OLD=1\n"


def test_atomic_write_killed_at_any_moment_leaves_a_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "fabricmanager.cfg"
    old, new = "OLD=1\n", "NEW=1\n" * 200000
    for _ in range(5):
        target.write_text(old, encoding="utf-8")
        with runkit.Child([sys.executable, "-c", _WRITE_LOOP, target], merge_output=True) as proc:
            proc.wait_line("^go$")
            proc.signal(signal.SIGKILL)
            proc.wait()
        assert target.read_text(encoding="utf-8") in (old, new)


@pytest.mark.parametrize("value", ["/var/log/fabricmanager.log ", " /var/log/fabricmanager.log",
                                   "/var/log/fabricmanager.log\t"])
def test_fm_set_value_with_blanks_at_an_end_is_refused_not_trimmed(
        tmp_path: Path, value: str) -> None:
    """``--fm-set KEY='V '`` was trimmed silently (NVFM_CONFIG_KEY='V ' was refused): the same
    rule for both, README "What the readers refuse", "Config values"."""
    root = tmp_path / "node"
    assert run_cli("simulate", "dgx-b200", str(root)).returncode == 0
    ok = run_cli("run", "--root", str(root), "--dry-run", "--fm-set",
                 "LOG_FILE_NAME=/var/log/fabricmanager.log")
    assert ok.returncode == 0, ok.stderr
    proc = run_cli("run", "--root", str(root), "--dry-run", "--fm-set", f"LOG_FILE_NAME={value}")
    assert proc.returncode == 2, proc.stdout
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "LOG_FILE_NAME: value may not start or end with blanks" in err
    env_proc = run_cli("run", "--root", str(root), "--dry-run",
                       env={"NVFM_CONFIG_LOG_FILE_NAME": value})
    assert env_proc.returncode == 2
    assert "LOG_FILE_NAME: value may not start or end with blanks" in env_proc.stderr


def test_known_keys_of_a_shipped_file_with_a_run_of_blank_lines_stays_linear(
        tmp_path: Path) -> None:
    """make fuzz (fm-config): the shipped file's key scan, ``(?m)^\\s*#?\\s*KEY\\s*=``, was cubic
    in a run of blank lines (1,000: 2.6 s; 4,000: 130 s), and ``run`` scans it for every
    --fm-set. The real shipped 535 file with 4,000 blank lines added keeps its keys, and
    ``run --dry-run --fm-set`` on such a node answers (the timeout guards the old hang)."""
    shipped = (CORPUS / "configs" / "fabricmanager-535.216.01.cfg").read_text()
    padded = "\n" * 4000 + shipped.replace("\n\n", "\n" + " \n" * 500 + "\t\n", 1)
    assert fmkeys.known_keys(padded) == fmkeys.known_keys(shipped)
    assert {"LOG_LEVEL", "FABRIC_MODE_RESTART", "STATE_FILE_NAME"} <= fmkeys.known_keys(padded)
    root = tmp_path / "node"
    assert run_cli("simulate", "hgx-h100", str(root)).returncode == 0
    cfg = root / "usr/share/nvidia/nvswitch/fabricmanager.cfg"
    cfg.write_text("\n" * 4000 + cfg.read_text())
    proc = run_cli("run", "--root", str(root), "--dry-run", "--fm-set", "LOG_LEVEL=4",
                   timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "LOG_LEVEL=4" in proc.stdout
