"""RUN.md R08 and the install record: a missing vendor package is a fault of the node (exit 1,
one finding per missing file with the `nvfabric install` line); a path the operator typed that
does not exist is exit 2; after `nvfabric install`, `run` finds what was installed under
<prefix>/fabricmanager-V through its install record, and `run --dry-run` says which it uses."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nvfabric.artifacts.install import install_archive
from nvfabric.artifacts.installed import DEFAULT_PREFIX, installed
from nvfabric.artifacts.model import Artifact
from nvfabric.commands.fetch import DEFAULT_PREFIX as FETCH_PREFIX
from tests.cases import load_run_cases
from tests.runkit import Run, events, sim
from tests.test_fetch_mirror import make_archive, sha256

H100_DRIVER = "550.90.07"  # the hgx-h100 profile's driver (proc/driver/nvidia/version)


def _run(root: Path, *args: str) -> tuple[dict[str, Any], int, str]:
    proc = subprocess.run([sys.executable, "-m", "nvfabric", "run", "--root", str(root),
                           "--json", *args], capture_output=True, text=True, timeout=60,
                          check=False)
    return json.loads(proc.stdout), proc.returncode, proc.stderr


def _remove_fm_package(root: Path) -> None:
    (root / "usr/bin/nv-fabricmanager").unlink()
    shutil.rmtree(root / "usr/share/nvidia/nvswitch")


def test_r08_is_in_run_md() -> None:
    assert "`nvfabric install`" in load_run_cases()["R08"]


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
def test_r08_missing_fabric_manager_package_is_one_finding_per_file(
        tmp_path: Path, dry: bool) -> None:
    root = sim(tmp_path, "hgx-h100")
    _remove_fm_package(root)
    out, rc, _ = _run(root, *(["--dry-run"] if dry else []))
    assert (rc, out["result"]) == (1, "refused")
    by_code = {f["code"]: f for f in out["findings"]}
    assert set(by_code) == {"binary_missing", "package_file_missing", "topology_file_missing"}
    line = f"nvfabric install --components fabricmanager --driver-version {H100_DRIVER}"
    for f in by_code.values():
        assert f["install"] == line and f"`{line}`" in f["hint"]
    assert by_code["binary_missing"]["path"] == "/usr/bin/nv-fabricmanager"
    assert by_code["package_file_missing"]["path"] == "/usr/share/nvidia/nvswitch/fabricmanager.cfg"
    assert by_code["topology_file_missing"]["path"] == "/usr/share/nvidia/nvswitch"
    assert not events(root, event="exec") and not (root / "run/nvfabric").exists()


def test_r08_missing_nvlsm_package_on_nvlink5(tmp_path: Path) -> None:
    root = sim(tmp_path, "dgx-b200")
    (root / "opt/nvidia/nvlsm/sbin/nvlsm").unlink()
    (root / "usr/share/nvidia/nvlsm/nvlsm.conf").unlink()
    out, rc, _ = _run(root, "--dry-run")
    assert rc == 1
    found = {(f["code"], f["file"]) for f in out["findings"]}
    assert found == {("nvlsm_missing", "--nvlsm-bin"), ("package_file_missing", "--nvlsm-config")}
    assert all(f["install"].startswith("nvfabric install --components nvlsm")
               for f in out["findings"])


def test_r08_human_output_names_each_file_and_the_fix(tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    _remove_fm_package(root)
    proc = subprocess.run([sys.executable, "-m", "nvfabric", "run", "--root", str(root),
                           "--dry-run"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1
    text = " ".join(proc.stderr.split())
    assert "a vendor package is missing" in text
    assert "nvfabric install --components fabricmanager" in text


@pytest.mark.parametrize(("flag", "what"), [("--fm-bin", "not an executable file"),
                                            ("--fm-config", "no such file"),
                                            ("--nvlsm-config", "no such file")])
def test_a_typed_path_that_does_not_exist_is_exit_2(tmp_path: Path, flag: str, what: str) -> None:
    root = sim(tmp_path, "dgx-b200")
    out, rc, _ = _run(root, "--dry-run", flag, "/opt/elsewhere/missing")
    assert rc == 2 and out["error"]["code"] == "input_unreadable"
    assert f"{flag} /opt/elsewhere/missing: {what}" in out["error"]["message"]


def _install_fm(root: Path, version: str) -> Path:
    """`nvfabric install`'s result for fabric manager ``version``: a redist-shaped archive
    (bin/nv-fabricmanager, etc/fabricmanager.cfg, share/nvidia/nvswitch/*_topology) extracted
    under <root>/opt/nvfabric with its install record. The binary execs the node's fake."""
    shipped = (root / "usr/share/nvidia/nvswitch/fabricmanager.cfg").read_bytes()
    files = {
        "bin/nv-fabricmanager": f'#!/bin/sh\nexec {root}/bin/nv-fabricmanager "$@"\n'.encode(),
        "etc/fabricmanager.cfg": shipped,
        "share/nvidia/nvswitch/dgxh100_hgxh100_topology": b"\x00topology",
        "LICENSE.txt": b"licence\n",
    }
    top = f"fabricmanager-linux-x86_64-{version}-archive"
    data = make_archive(top, files)
    archive = root.parent / f"{top}.tar.xz"
    archive.write_bytes(data)
    art = Artifact("fabricmanager", version, "x86_64", f"file:///{top}.tar.xz", sha256(data),
                   len(data), "redist")
    done = install_archive(str(archive), art, str(root / "opt/nvfabric"))
    return Path(done.path)


def test_run_finds_what_nvfabric_install_installed(tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    where = _install_fm(root, H100_DRIVER)
    _install_fm(root, "535.161.08")  # another version: never taken for this driver
    _remove_fm_package(root)
    out, rc, err = _run(root, "--dry-run")
    assert (rc, out["result"]) == (0, "would_start"), (out, err)
    host = f"/opt/nvfabric/fabricmanager-{H100_DRIVER}"
    assert out["processes"][0]["argv"][0] == f"{where}/bin/nv-fabricmanager"
    sources = {v["file"]: v for v in out["vendor_files"]}
    record = f"install record {host}/.nvfabric-install.json"
    assert sources["--fm-bin"] == {"file": "--fm-bin", "path": f"{host}/bin/nv-fabricmanager",
                                   "source": record}
    assert sources["--fm-config"]["path"] == f"{host}/etc/fabricmanager.cfg"
    assert sources["topology"]["path"] == f"{host}/share/nvidia/nvswitch"
    cfg = out["files"][0]["content"]
    assert f"TOPOLOGY_FILE_PATH={where}/share/nvidia/nvswitch\n" in cfg
    assert f"DATABASE_PATH={where}/share/nvidia/nvswitch\n" in cfg
    human = subprocess.run([sys.executable, "-m", "nvfabric", "run", "--root", str(root),
                            "--dry-run"], capture_output=True, text=True, timeout=60,
                           check=False)
    assert human.returncode == 0
    assert f"note: --fm-bin: {host}/bin/nv-fabricmanager (from the {record})" in human.stdout


def test_the_installed_fabric_manager_really_runs(tmp_path: Path,
                                                  start: Callable[..., Run]) -> None:
    root = sim(tmp_path, "hgx-h100")
    where = _install_fm(root, H100_DRIVER)
    _remove_fm_package(root)
    run = start(root, "--json")
    run.wait_line(r"fabric ready in")
    (fm,) = events(root, "fabricmanager", "exec")
    assert Path(fm["argv"][fm["argv"].index("-c") + 1]).read_text(encoding="utf-8").count(
        f"TOPOLOGY_FILE_PATH={where}/share/nvidia/nvswitch") == 1
    run.signal(signal.SIGTERM)
    assert run.wait() == 0


def test_vendor_files_win_over_an_install_and_a_damaged_install_is_not_used(
        tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    where = _install_fm(root, H100_DRIVER)
    out, rc, _ = _run(root, "--dry-run")
    assert rc == 0 and {v["source"] for v in out["vendor_files"]} == {"vendor"}
    _remove_fm_package(root)
    (where / "bin/nv-fabricmanager").write_text("#!/bin/sh\necho tampered\n", encoding="utf-8")
    out, rc, _ = _run(root, "--dry-run")
    assert rc == 1 and "binary_missing" in {f["code"] for f in out["findings"]}
    assert "package_file_missing" not in {f["code"] for f in out["findings"]}  # still intact


def test_installed_reader_picks_the_version_and_the_record(tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    assert installed(str(root), "fabricmanager") is None
    _install_fm(root, "535.161.08")
    _install_fm(root, "550.127.05")
    newest = installed(str(root), "fabricmanager")
    assert newest is not None and newest.version == "550.127.05"
    exact = installed(str(root), "fabricmanager", "535.161.08")
    assert exact is not None and exact.find("nv-fabricmanager", executable=True) == \
        "/opt/nvfabric/fabricmanager-535.161.08/bin/nv-fabricmanager"
    assert exact.find("LICENSE.txt", executable=True) is None
    assert installed(str(root), "fabricmanager", "570.1.1") is None
    assert DEFAULT_PREFIX == FETCH_PREFIX
