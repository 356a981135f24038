"""``nvfabric unit install`` and the unit's one text: the file the Debian package ships
(packaging/systemd/nvfabric.service) is byte for byte what ``unit install`` writes, and the
unit's timeouts fit the defaults of ``nvfabric run`` they are derived from."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import sys
from pathlib import Path

import pytest

from nvfabric.cli.run import run_cmd
from nvfabric.effects import unitfile
from nvfabric.facts.gpu import SMI_TIMEOUT_S
from tests.conftest import REPO, run_cli, run_json

PACKAGED = REPO / "packaging" / "systemd" / "nvfabric.service"
UNIT_PATH = "etc/systemd/system/nvfabric.service"


def unit_values(text: str) -> dict[str, list[str]]:
    """key -> every value it is given (comments skipped), the way systemd reads the file."""
    out: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key, []).append(value)
    return out


def seconds(value: str) -> float:
    """A systemd time span of this unit (``10min``, ``45s``) in seconds."""
    m = re.fullmatch(r"(\d+)(min|s)", value)
    assert m, value
    return int(m[1]) * (60 if m[2] == "min" else 1)


def test_packaged_unit_is_byte_for_byte_what_unit_install_writes(tmp_path: Path) -> None:
    proc = run_cli("unit", "install", "--root", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    written = (tmp_path / UNIT_PATH).read_bytes()
    assert written == PACKAGED.read_bytes() == unitfile.unit_text().encode()


def test_unit_keys_the_live_behaviour_depends_on() -> None:
    v = unit_values(unitfile.unit_text())
    assert v["Type"] == ["notify"] and v["NotifyAccess"] == ["main"]
    assert v["ExecStart"] == ["/usr/bin/nvfabric run"]
    assert v["KillMode"] == ["mixed"] and v["Restart"] == ["on-failure"]
    assert set(" ".join(v["Conflicts"]).split()) == {
        "nvidia-fabricmanager.service", "nvlsm.service"}
    # nvfabric defers to another IMEX owner and never stops it: the host unit is ordered
    # before nvfabric, never in conflict with it
    assert "nvidia-imex.service" not in " ".join(v["Conflicts"] + v["Before"])
    assert "nvidia-imex.service" in " ".join(v["After"])
    assert "nvidia-persistenced.service" in v["After"] and \
        "nvidia-persistenced.service" in v["Wants"]
    assert v["StartLimitBurst"] and v["StartLimitIntervalSec"] and v["WatchdogSec"]


def _default(option: str) -> float:
    (param,) = [p for p in run_cmd.params if p.name == option]
    assert isinstance(param.default, float)
    return param.default


def test_unit_timeouts_fit_the_run_defaults() -> None:
    v = unit_values(unitfile.unit_text())
    # start: the preflight's GPU probe, the GPU reset of a restart after registration (the
    # drop-in README gives), NVLSM's socket, then GPU registration up to the
    # registration_stuck report: all before systemd's start timeout
    assert seconds(v["TimeoutStartSec"][0]) > SMI_TIMEOUT_S + _default("gpu_reset_timeout") \
        + _default("socket_timeout") + _default("ready_timeout")
    # stop: fabric manager then NVLSM, each SIGTERM then SIGKILL after --grace
    assert seconds(v["TimeoutStopSec"][0]) > 2 * _default("grace")
    # restart: systemd's, so nvfabric's in-process restart stays off (its default)
    assert [p.default for p in run_cmd.params if p.name == "restart"] == ["never"]


def test_install_writes_0644_then_is_idempotent_then_keeps_a_backup(tmp_path: Path) -> None:
    data, code = run_json("unit", "install", "--root", str(tmp_path))
    path = tmp_path / UNIT_PATH
    assert code == 0
    assert data["result"] == "written" and data["path"] == str(path) and data["backup"] is None
    assert data["next"] == [f"systemctl --root {tmp_path} enable nvfabric.service"]
    assert data["content"] == unitfile.unit_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    before = path.stat().st_mtime_ns
    data, code = run_json("unit", "install", "--root", str(tmp_path))
    assert (code, data["result"]) == (0, "unchanged") and path.stat().st_mtime_ns == before
    path.write_text("[Service]\nExecStart=/usr/bin/true\n")
    proc = run_cli("unit", "install", "--root", str(tmp_path))
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[:2] == [
        f"replaced {path}", f"the previous file is kept as {path}.nvfabric.bak"]
    assert (tmp_path / (UNIT_PATH + ".nvfabric.bak")).read_text() == \
        "[Service]\nExecStart=/usr/bin/true\n"
    assert path.read_text() == unitfile.unit_text()
    assert sorted(os.listdir(path.parent)) == ["nvfabric.service", "nvfabric.service.nvfabric.bak"]


@pytest.mark.parametrize("name", ["img 2", "it's", "a;b", "$x"])
def test_the_next_step_printed_for_a_tree_is_quoted_for_the_shell(tmp_path: Path,
                                                                   name: str) -> None:
    root = tmp_path / name
    root.mkdir()
    data, code = run_json("unit", "install", "--root", str(root))
    assert code == 0
    (step,) = data["next"]
    assert shlex.split(step) == ["systemctl", "--root", str(root), "enable", "nvfabric.service"]


def test_install_on_the_host_says_daemon_reload_and_enable() -> None:
    assert unitfile.next_steps("/") == ["systemctl daemon-reload",
                                        "systemctl enable --now nvfabric.service"]


def test_install_names_the_package_unit_it_overrides(tmp_path: Path) -> None:
    pkg = tmp_path / "usr/lib/systemd/system/nvfabric.service"
    pkg.parent.mkdir(parents=True)
    pkg.write_text(unitfile.unit_text())
    data, code = run_json("unit", "install", "--root", str(tmp_path))
    assert code == 0 and data["shadows"] == str(pkg)


def test_dry_run_prints_exactly_the_unit_and_writes_nothing(tmp_path: Path) -> None:
    proc = run_cli("unit", "install", "--root", str(tmp_path), "--dry-run")
    assert proc.returncode == 0
    assert proc.stdout == unitfile.unit_text()
    assert proc.stderr.splitlines() == [
        f"nvfabric: would write {tmp_path / UNIT_PATH}",
        "nvfabric: ExecStart: /usr/bin/nvfabric, which the tree does not have yet: install "
        "nvfabric there (the .deb, or the single-file binary as /usr/bin/nvfabric) before the "
        "unit starts"]
    assert os.listdir(tmp_path) == []
    data, code = run_json("unit", "install", "--root", str(tmp_path), "--dry-run")
    assert (code, data["result"], data["dry_run"]) == (0, "would_write", True)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("kind", ["masked", "link", "directory"])
def test_a_link_or_directory_at_the_unit_path_is_refused_and_left_alone(
        tmp_path: Path, kind: str) -> None:
    path = tmp_path / UNIT_PATH
    path.parent.mkdir(parents=True)
    other = tmp_path / "elsewhere.service"
    other.write_text("mine\n")
    if kind == "masked":  # `systemctl mask nvfabric.service`
        path.symlink_to(os.devnull)
    elif kind == "link":  # `systemctl link /somewhere/nvfabric.service`
        path.symlink_to(other)
    else:
        path.mkdir()
    data, code = run_json("unit", "install", "--root", str(tmp_path))
    assert code == 1
    err = data["error"]
    assert err["code"] == "unit_not_installed" and err["path"] == str(path)
    assert "nothing was written" in err["message"]
    if kind == "masked":
        assert "masked" in err["message"] and "systemctl unmask" in err["hint"]
        assert os.readlink(path) == os.devnull
    elif kind == "link":
        assert os.readlink(path) == str(other) and other.read_text() == "mine\n"
    assert sorted(os.listdir(path.parent)) == ["nvfabric.service"]


def test_a_backup_name_linked_out_of_the_root_is_replaced_not_written_through(
        tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "precious"
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / UNIT_PATH).write_text("[Service]\nExecStart=/usr/bin/old\n")
    outside.write_text("precious\n")
    (root / (UNIT_PATH + ".nvfabric.bak")).symlink_to(outside)
    data, code = run_json("unit", "install", "--root", str(root))
    assert code == 0 and data["result"] == "replaced"
    assert outside.read_text() == "precious\n"
    assert (root / (UNIT_PATH + ".nvfabric.bak")).read_text() == \
        "[Service]\nExecStart=/usr/bin/old\n"
    assert (root / UNIT_PATH).read_text() == unitfile.unit_text()


def test_unit_dir_linked_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "etc/systemd").mkdir(parents=True)
    outside.mkdir()
    (root / "etc/systemd/system").symlink_to(outside)
    proc = run_cli("unit", "install", "--root", str(root))
    assert proc.returncode == 1
    assert "outside the root" in proc.stderr and "Traceback" not in proc.stderr
    assert os.listdir(outside) == []


def test_unwritable_target_is_one_line_and_exit_1(tmp_path: Path) -> None:
    # a file where the directory etc/systemd/system should be: the write cannot happen
    (tmp_path / "etc/systemd").mkdir(parents=True)
    (tmp_path / "etc/systemd/system").write_text("not a directory\n")
    proc = run_cli("unit", "install", "--root", str(tmp_path))
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith("nvfabric: unit_not_installed: ") and "etc/systemd/system" in line
    assert (tmp_path / "etc/systemd/system").read_text() == "not a directory\n"


@pytest.mark.parametrize("blocked", ["etc/systemd/system", "etc/systemd", "etc"])
def test_a_file_where_a_directory_should_be_is_named_not_blamed_on_permissions(
        tmp_path: Path, blocked: str) -> None:
    (tmp_path / blocked).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / blocked).write_text("a file\n")
    data, code = run_json("unit", "install", "--root", str(tmp_path))
    assert code == 1 and data["error"]["code"] == "unit_not_installed"
    assert data["error"]["message"] == (f"{tmp_path / blocked} is a file where a directory "
                                        "should be; nothing was written")
    assert f"move {tmp_path / blocked} away" in data["error"]["hint"]
    assert "permission" not in data["error"]["hint"]
    assert (tmp_path / blocked).read_text() == "a file\n"


def test_missing_root_is_a_usage_error(tmp_path: Path) -> None:
    data, code = run_json("unit", "install", "--root", str(tmp_path / "nope"))
    assert code == 2 and data["error"]["code"] == "input_unreadable"
    assert not (tmp_path / "nope").exists()


def test_unit_text_is_valid_utf8_ending_in_newline() -> None:
    raw = PACKAGED.read_bytes()
    assert raw.endswith(b"\n") and json.dumps(raw.decode("utf-8"))


# -- ExecStart names the nvfabric that can run: a virtual environment's is not /usr/bin ------

def test_from_a_venv_outside_home_directories_execstart_is_the_venvs_nvfabric() -> None:
    start = unitfile.exec_start("/", ("/opt/nvfabric/venv/bin/nvfabric",), "/usr/bin/python3")
    assert start.argv == ("/opt/nvfabric/venv/bin/nvfabric",)
    assert start.why.startswith("/opt/nvfabric/venv/bin/nvfabric: the running nvfabric "
                                "(/usr/bin/nvfabric ")
    text = unitfile.unit_text_for(start)
    assert "\nExecStart=/opt/nvfabric/venv/bin/nvfabric run\n" in text
    assert "\nExecStart=/usr/bin/nvfabric run\n" not in text
    # one line changed, one comment above it; the rest is the shipped unit
    shipped = unitfile.unit_text().splitlines()
    changed = [x for x in text.splitlines() if x not in shipped]
    assert len(changed) == 2 and changed[0].startswith("# ExecStart: ")
    python_m = unitfile.exec_start("/", ("/opt/v/bin/python", "-m", "nvfabric"),
                                   "/opt/v/bin/python")
    assert "\nExecStart=/opt/v/bin/python -m nvfabric run\n" in unitfile.unit_text_for(python_m)


@pytest.mark.parametrize(("program", "interpreter", "words"), [
    (("/home/ops/venv/bin/nvfabric",), "/usr/bin/python3", "under a home directory"),
    (("/opt/venv/bin/nvfabric",), "/root/.pyenv/versions/3.11.7/bin/python3.11",
     "/root/.pyenv/versions/3.11.7/bin/python3.11, under a home directory"),
    (("/opt/my venv/bin/nvfabric",), "/usr/bin/python3", "cannot hold"),
    (("/opt/50%/bin/nvfabric",), "/usr/bin/python3", "cannot hold"),
])
def test_an_nvfabric_the_unit_could_not_run_is_refused_with_the_fix(
        program: tuple[str, ...], interpreter: str, words: str) -> None:
    with pytest.raises(unitfile.UnitError) as err:
        unitfile.exec_start("/", program, interpreter)
    assert words in err.value.finding.message and "nothing was written" in err.value.finding.message
    assert "the .deb (/usr/bin/nvfabric)" in err.value.finding.hint


def test_in_a_tree_execstart_stays_the_trees_usr_bin_nvfabric_and_says_so(tmp_path: Path) -> None:
    program = ("/opt/venv/bin/nvfabric",)
    start = unitfile.exec_start(str(tmp_path), program, "/usr/bin/python3")
    assert start.argv == ("/usr/bin/nvfabric",) and "does not have yet" in start.why
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/nvfabric").write_text("#!/bin/sh\n")
    start = unitfile.exec_start(str(tmp_path), program, "/usr/bin/python3")
    assert start.why == "/usr/bin/nvfabric: the tree's nvfabric"


def test_unit_install_on_this_host_from_the_venv_names_it_or_refuses(tmp_path: Path) -> None:
    # --dry-run on / writes nothing. The test's own venv: its nvfabric goes in ExecStart,
    # unless its Python lives under a home directory (pyenv under /root), which
    # ProtectHome=yes hides: then a refusal naming it, never /usr/bin/nvfabric silently.
    data, code = run_json("unit", "install", "--root", "/", "--dry-run")
    script = str(Path(sys.executable).parent / "nvfabric")
    if os.path.realpath(sys.executable).startswith(unitfile.HOME_DIRS):
        assert code == 1 and data["error"]["code"] == "unit_not_installed", data
        assert script in data["error"]["message"]
    else:
        assert code == 0, data
        assert data["exec_start"]["argv"] == [script, "run"]
        assert f"\nExecStart={script} run\n" in data["content"]
