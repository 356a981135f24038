"""RUN.md R08 and the install record: a missing vendor package is a fault of the node (exit 1,
one finding per missing file with the `nvfabric install` line); a path the operator typed that
does not exist is exit 2; after `nvfabric install`, `run` finds what was installed under
<prefix>/fabricmanager-V through its install record, and `run --dry-run` says which it uses."""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nvfabric.artifacts.install import install_archive
from nvfabric.artifacts.installed import DEFAULT_PREFIX, installed
from nvfabric.artifacts.model import Artifact
from nvfabric.cli.fetch import DEFAULT_PREFIX as FETCH_PREFIX
from tests.cases import load_run_cases
from tests.cli.test_fetch_mirror import make_archive, sha256
from tests.conftest import run_cli
from tests.runkit import Run, events, sim

H100_DRIVER = "550.90.07"  # the hgx-h100 profile's driver (proc/driver/nvidia/version)


def _run(root: Path, *args: str) -> tuple[dict[str, Any], int, str]:
    proc = run_cli("run", "--root", str(root), "--json", *args)
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
    line = (f"nvfabric install --root {root} --components fabricmanager --driver-version "
            f"{H100_DRIVER}")
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
    assert all(f["install"].startswith(f"nvfabric install --root {root} --components nvlsm")
               for f in out["findings"])


def test_r08_human_output_names_each_file_and_the_fix(tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    _remove_fm_package(root)
    proc = run_cli("run", "--root", str(root), "--dry-run")
    assert proc.returncode == 1
    text = " ".join(proc.stderr.split())
    assert "a vendor package is missing" in text
    assert f"nvfabric install --root {root} --components fabricmanager" in text


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
    human = run_cli("run", "--root", str(root), "--dry-run")
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


def test_nvlsm_is_found_through_its_newest_install_record(tmp_path: Path) -> None:
    import io
    import tarfile

    root = sim(tmp_path, "dgx-b200")
    conf = (root / "usr/share/nvidia/nvlsm/nvlsm.conf").read_bytes()
    (root / "opt/nvidia/nvlsm/sbin/nvlsm").unlink()
    (root / "usr/share/nvidia/nvlsm/nvlsm.conf").unlink()
    for version in ("2025.03.1", "2025.06.6"):
        top = f"nvlsm-linux-x86_64-{version}-archive"
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:xz") as tar:
            for name, data, mode in (
                    ("sbin/nvlsm", f'#!/bin/sh\nexec {root}/bin/nvlsm "$@"\n'.encode(), 0o755),
                    ("share/nvidia/nvlsm/nvlsm.conf", conf, 0o644)):
                info = tarfile.TarInfo(f"{top}/{name}")
                info.size, info.mode = len(data), mode
                tar.addfile(info, io.BytesIO(data))
        archive = tmp_path / f"{top}.tar.xz"
        archive.write_bytes(buf.getvalue())
        install_archive(str(archive), Artifact("nvlsm", version, "x86_64", "file:///x",
                                               sha256(buf.getvalue()), None, "redist"),
                        str(root / "opt/nvfabric"))
    out, rc, err = _run(root, "--dry-run")
    assert rc == 0, (out, err)
    argv = next(p["argv"] for p in out["processes"] if p["service"] == "nvlsm")
    assert argv[0] == f"{root}/opt/nvfabric/nvlsm-2025.06.6/sbin/nvlsm"
    assert argv[argv.index("-F") + 1] == \
        f"{root}/opt/nvfabric/nvlsm-2025.06.6/share/nvidia/nvlsm/nvlsm.conf"


def _damage(where: Path, how: str) -> None:
    """Damage the install record at ``where`` the way ``how`` names (not what install writes)."""
    rec_path = where / ".nvfabric-install.json"
    record = json.loads(rec_path.read_text(encoding="utf-8"))
    binary = next(f for f in record["files"] if f["path"] == "bin/nv-fabricmanager")
    if how == "not json":
        rec_path.write_text("{broken", encoding="utf-8")
        return
    if how == "files not a list":
        record["files"] = "bin/nv-fabricmanager"
    elif how == "path with ..":
        binary["path"] = "../../../../bin/nv-fabricmanager"
    elif how == "absolute path":
        binary["path"] = "/bin/nv-fabricmanager"
    elif how == "mode not octal":
        binary["mode"] = "rwx"
    elif how == "sha256 not hex":
        binary["sha256"] = None
    elif how == "other component":
        record["component"] = "nvlsm"
    rec_path.write_text(json.dumps(record), encoding="utf-8")


@pytest.mark.parametrize("how", ["not json", "files not a list", "path with ..",
                                 "absolute path", "mode not octal", "sha256 not hex",
                                 "other component"])
def test_a_damaged_install_record_is_a_node_fault_never_exit_3(tmp_path: Path,
                                                               how: str) -> None:
    """A record whose entries are not what install writes offers nothing: run refuses with
    exit 1 and says the record is damaged (before: '..' or a bad mode was exit 3, a broken
    record was reported as 'no nvfabric install put one')."""
    root = sim(tmp_path, "hgx-h100")
    where = _install_fm(root, H100_DRIVER)
    _remove_fm_package(root)
    _damage(where, how)
    out, rc, err = _run(root, "--dry-run")
    assert (rc, out.get("result")) == (1, "refused"), (out, err)
    by_code = {f["code"]: f for f in out["findings"]}
    assert set(by_code) == {"binary_missing", "package_file_missing", "topology_file_missing"}
    record = f"/opt/nvfabric/fabricmanager-{H100_DRIVER}/.nvfabric-install.json"
    for f in by_code.values():
        assert f"install record {record} is damaged" in f["message"], f["message"]
        assert f["install_record"] == record and "reinstall" in f["hint"]
    assert out["vendor_files"] == []


def test_an_install_reached_through_a_link_out_of_the_root_is_not_used(tmp_path: Path) -> None:
    """<root>/opt/nvfabric a link to a directory outside the root (a copied image tree): the
    files match their record there, but they are not the node's; nothing is taken from it."""
    root = sim(tmp_path, "hgx-h100")
    _install_fm(root, H100_DRIVER)
    _remove_fm_package(root)
    outside = tmp_path / "elsewhere"
    (root / "opt/nvfabric").rename(outside)
    (root / "opt/nvfabric").symlink_to(outside)
    out, rc, err = _run(root, "--dry-run")
    assert (rc, out.get("result")) == (1, "refused"), (out, err)
    assert {f["code"] for f in out["findings"]} == {
        "binary_missing", "package_file_missing", "topology_file_missing"}
    assert all("leading out of the root" in f["message"] for f in out["findings"])
    assert not any(str(outside) in p["argv"][0] for p in out["processes"])


def test_a_changed_installed_file_is_named_with_its_record(tmp_path: Path) -> None:
    root = sim(tmp_path, "hgx-h100")
    where = _install_fm(root, H100_DRIVER)
    _remove_fm_package(root)
    (where / "bin/nv-fabricmanager").write_text("#!/bin/sh\necho tampered\n", encoding="utf-8")
    out, rc, _ = _run(root, "--dry-run")
    (binary,) = [f for f in out["findings"] if f["code"] == "binary_missing"]
    host = f"/opt/nvfabric/fabricmanager-{H100_DRIVER}"
    assert rc == 1 and f"{host}/bin/nv-fabricmanager no longer matches its install record" \
        in binary["message"]


def test_a_vendor_path_linking_out_of_the_root_is_not_the_nodes_file(tmp_path: Path) -> None:
    """A copied image tree's absolute link (/usr/bin/nv-fabricmanager -> a host path) is not
    the node's binary: run refuses with the finding saying where the link leads (before, the
    host's file was executed for the version check and would have been started)."""
    root = sim(tmp_path, "hgx-h100")
    host_binary = tmp_path / "host-bin/nv-fabricmanager"
    host_binary.parent.mkdir()
    shutil.copy(root / "bin/nv-fabricmanager", host_binary)
    (root / "usr/bin/nv-fabricmanager").unlink()
    (root / "usr/bin/nv-fabricmanager").symlink_to(host_binary)
    out, rc, err = _run(root, "--dry-run")
    assert (rc, out["result"]) == (1, "refused"), (out, err)
    (binary,) = out["findings"]
    assert binary["code"] == "binary_missing"
    assert f"/usr/bin/nv-fabricmanager is a link leading out of the root (to {host_binary})" \
        in binary["message"]
    out, rc, _ = _run(root, "--dry-run", "--fm-bin", "/usr/bin/nv-fabricmanager")
    assert rc == 2 and "leads out of the root" in out["error"]["message"]


def test_the_install_line_installs_into_the_node_that_was_checked() -> None:
    """Following the hint of `run --root DIR` must install under DIR, not into the host."""
    from nvfabric.bringup.vendor import install_line

    assert install_line("fabricmanager", "550.90.07") == \
        "nvfabric install --components fabricmanager --driver-version 550.90.07"
    assert install_line("nvlsm", None, "/srv/images/node a") == \
        "nvfabric install --root '/srv/images/node a' --components nvlsm"


@pytest.mark.parametrize("value", ["usr/share/nvidia/nvswitch",
                                   "/usr/share/../share/nvidia/nvswitch"])
def test_a_shipped_topology_path_that_is_relative_or_has_dotdot_names_the_key(
        tmp_path: Path, value: str) -> None:
    """The shipped fabricmanager.cfg's TOPOLOGY_FILE_PATH with '..' was exit 3 (ValueError in
    the vendor-file lookup); relative or '..', it is the config key's error, exit 2."""
    root = sim(tmp_path, "hgx-h100")
    cfg = root / "usr/share/nvidia/nvswitch/fabricmanager.cfg"
    text = cfg.read_text(encoding="utf-8")
    assert "\nTOPOLOGY_FILE_PATH=" in text
    cfg.write_text("\n".join(f"TOPOLOGY_FILE_PATH={value}"
                             if line.startswith("TOPOLOGY_FILE_PATH=") else line
                             for line in text.split("\n")), encoding="utf-8")
    out, rc, err = _run(root, "--dry-run")
    assert rc == 2 and out["error"]["code"] == "config_invalid_value", (out, err)
    assert "TOPOLOGY_FILE_PATH" in out["error"]["message"]
