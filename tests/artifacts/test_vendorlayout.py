"""The fabric an image carries, and the fabric a container installs at start, on simulated
nodes: ``nvfabric fetch`` from a local mirror of stand-in archives (tests/fabrickit.py), then
``install --from DIR --layout vendor`` into a root (the image being built), or ``install`` into
the node's cache (the run-time path); a node simulated ``--driver-only`` (the driver, no fabric
packages) then comes up with exactly those daemons."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from nvfabric.artifacts.tables import VENDOR_LAYOUT
from nvfabric.artifacts.vendorlayout import REQUIRED, destination, missing
from tests.conftest import run_json
from tests.fabrickit import stand_in_release, write_mirror
from tests.runkit import Run, events

DRIVER = "570.148.08"  # the driver of the dgx-b200 and gb200-tray profiles


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    return write_mirror(tmp_path / "mirror", stand_in_release(DRIVER))


def fetch(mirror: Path, dest: Path, arch: str, fabric: str) -> dict[str, object]:
    out, rc = run_json("fetch", "--driver-version", DRIVER, "--arch", arch, "--fabric", fabric,
                       "--mirror", str(mirror), "--dest", str(dest), "--retries", "0")
    assert rc == 0, out
    return out


def lay_out(artifacts: Path, root: Path, arch: str, fabric: str,
            *extra: str) -> tuple[dict[str, object], int]:
    return run_json("install", "--from", str(artifacts), "--root", str(root), "--arch", arch,
                    "--fabric", fabric, "--driver-version", DRIVER, "--layout", "vendor", *extra)


def test_x86_64_image_gets_fabric_manager_nvlsm_and_their_libraries_at_vendor_paths(
        mirror: Path, tmp_path: Path) -> None:
    fetched = fetch(mirror, tmp_path / "artifacts", "x86_64", "nvlink5")
    assert sorted(a["component"] for a in fetched["artifacts"]) == [  # type: ignore[index]
        "fabricmanager", "libnvidia_nscq", "libnvsdm", "nvlsm"]
    root = tmp_path / "image"
    out, rc = lay_out(tmp_path / "artifacts", root, "x86_64", "nvlink5")
    assert rc == 0, out
    assert out["layout"] == "vendor"
    for path in ("usr/bin/nv-fabricmanager", "opt/nvidia/nvlsm/sbin/nvlsm"):
        assert os.access(root / path, os.X_OK), path
    for path in ("usr/share/nvidia/nvswitch/fabricmanager.cfg",
                 "usr/share/nvidia/nvswitch/dgxb200_hgxb200_topology",
                 "usr/share/nvidia/nvlsm/nvlsm.conf", "opt/nvidia/nvlsm/lib/libgrpc_mgr.so",
                 f"usr/lib/x86_64-linux-gnu/libnvidia-nscq.so.{DRIVER}",
                 f"usr/lib/x86_64-linux-gnu/libnvsdm.so.{DRIVER}",
                 "usr/lib/x86_64-linux-gnu/libnvfm.so.1"):
        assert (root / path).is_file(), path
    assert os.readlink(root / "usr/lib/x86_64-linux-gnu/libnvfm.so") == "libnvfm.so.1"
    assert os.readlink(root / "usr/lib/x86_64-linux-gnu/libnvidia-nscq.so.2") == \
        f"libnvidia-nscq.so.{DRIVER}"
    # headers and the vendor's unit stay out of the image; nothing of another architecture
    assert not (root / "usr/include").exists() and not list(root.rglob("*.service"))
    assert not (root / "usr/lib/aarch64-linux-gnu").exists()
    mode = stat.S_IMODE((root / "usr/share/nvidia/nvswitch/fabricmanager.cfg").stat().st_mode)
    assert mode == 0o644
    record = json.loads((root / "usr/share/nvfabric/fabric.json").read_text())
    assert record["arch"] == "x86_64"
    by = {a["component"]: a for a in record["artifacts"]}
    assert by["nvlsm"]["version"] == "2025.06.6" and by["fabricmanager"]["version"] == DRIVER
    (entry,) = [f for f in by["fabricmanager"]["files"]
                if f["path"] == "/usr/bin/nv-fabricmanager"]
    assert entry["mode"] == "0755" and len(entry["sha256"]) == 64
    skipped = {i["component"]: i["skipped"] for i in out["installed"]}  # type: ignore[union-attr]
    assert "include/nv_fm_agent.h" in skipped["fabricmanager"]
    assert "systemd/nvidia-fabricmanager.service" in skipped["fabricmanager"]
    # a second layout of the same archives changes nothing
    def laid() -> dict[str, int]:
        return {str(p): p.stat().st_mtime_ns for p in root.rglob("*")
                if p.is_file() and p.name != "fabric.json"}

    before = laid()
    out, rc = lay_out(tmp_path / "artifacts", root, "x86_64", "nvlink5")
    assert rc == 0, out
    assert laid() == before


def test_aarch64_tray_image_gets_imex_with_the_target_multiarch_directory(
        mirror: Path, tmp_path: Path) -> None:
    # built on this x86_64 machine: every path comes from the target architecture
    fetched = fetch(mirror, tmp_path / "artifacts", "aarch64", "mnnvl")
    (art,) = fetched["artifacts"]  # type: ignore[misc]
    assert art["component"] == "imex" and art["arch"] == "sbsa"
    root = tmp_path / "image"
    out, rc = lay_out(tmp_path / "artifacts", root, "aarch64", "mnnvl")
    assert rc == 0, out
    assert os.access(root / "usr/bin/nvidia-imex", os.X_OK)
    assert os.access(root / "usr/bin/nvidia-imex-ctl", os.X_OK)
    assert (root / "etc/nvidia-imex/config.cfg").is_file()
    assert not (root / "usr/bin/nv-fabricmanager").exists()
    assert destination("libnvsdm", "lib/libnvsdm.so.1", "aarch64") == \
        "/usr/lib/aarch64-linux-gnu/libnvsdm.so.1"


def test_a_clash_with_a_file_already_in_the_root_writes_nothing(mirror: Path,
                                                                tmp_path: Path) -> None:
    fetch(mirror, tmp_path / "artifacts", "x86_64", "nvswitch")
    root = tmp_path / "image"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nv-fabricmanager").write_text("another version\n")
    out, rc = lay_out(tmp_path / "artifacts", root, "x86_64", "nvswitch")
    assert rc == 1 and out["error"]["code"] == "archive_unsafe", out  # type: ignore[index]
    assert "/usr/bin/nv-fabricmanager already exists" in out["error"]["message"]  # type: ignore
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == [
        "usr", "usr/bin", "usr/bin/nv-fabricmanager"]


def test_a_root_link_leading_out_is_refused(mirror: Path, tmp_path: Path) -> None:
    fetch(mirror, tmp_path / "artifacts", "x86_64", "nvswitch")
    root = tmp_path / "image"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(str(tmp_path / "elsewhere"), root / "usr")
    out, rc = lay_out(tmp_path / "artifacts", root, "x86_64", "nvswitch")
    assert rc == 2 and "outside the root" in out["error"]["message"], out  # type: ignore
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_every_file_run_needs_is_checked() -> None:
    assert missing("fabricmanager", {"/usr/bin/nv-fabricmanager"}) == [
        "/usr/share/nvidia/nvswitch/fabricmanager.cfg", "/usr/share/nvidia/nvswitch/*_topology"]
    assert missing("nvlsm", {"/opt/nvidia/nvlsm/sbin/nvlsm",
                             "/usr/share/nvidia/nvlsm/nvlsm.conf"}) == []
    assert missing("libnvsdm", set()) != [] and missing("libnvsdm", {"/usr/lib/x"}) == []
    assert set(REQUIRED) <= set(VENDOR_LAYOUT)
    assert destination("fabricmanager", "include/x.h", "x86_64") is None


def test_an_archive_without_its_daemon_is_refused_before_anything_is_written(
        tmp_path: Path) -> None:
    release = stand_in_release(DRIVER, components=("fabricmanager",))
    from tests.fabrickit import archive_files, make_archive, sha256

    files = archive_files("fabricmanager", DRIVER, None)
    del files["bin/nv-fabricmanager"]
    top = f"fabricmanager-linux-x86_64-{DRIVER}-archive"
    data = make_archive(top, files)
    rel = f"fabricmanager/linux-x86_64/{top}.tar.xz"
    release.archives[rel] = data
    release.manifest["fabricmanager"]["linux-x86_64"].update(sha256=sha256(data),
                                                             size=str(len(data)))
    mirror = write_mirror(tmp_path / "mirror", release)
    out, rc = run_json("fetch", "--driver-version", DRIVER, "--arch", "x86_64",
                       "--components", "fabricmanager", "--fabric", "nvswitch",
                       "--mirror", str(mirror), "--dest", str(tmp_path / "a"))
    assert rc == 0, out
    out, rc = run_json("install", "--from", str(tmp_path / "a"), "--root",
                       str(tmp_path / "image"), "--arch", "x86_64", "--fabric", "nvswitch",
                       "--driver-version", DRIVER, "--layout", "vendor")
    assert rc == 1 and out["error"]["code"] == "artifact_not_available", out  # type: ignore
    assert "/usr/bin/nv-fabricmanager" in out["error"]["message"]  # type: ignore[index]
    assert not (tmp_path / "image").exists() or not any((tmp_path / "image").rglob("*"))


def test_layout_vendor_needs_from_and_no_prefix(tmp_path: Path) -> None:
    out, rc = run_json("install", "--root", str(tmp_path), "--driver-version", DRIVER,
                       "--layout", "vendor", "--fabric", "nvswitch", "--arch", "x86_64")
    assert rc == 2 and "--from" in out["error"]["message"], out  # type: ignore[index]
    out, rc = run_json("install", "--from", str(tmp_path), "--root", str(tmp_path),
                       "--layout", "vendor", "--prefix", str(tmp_path / "p"))
    assert rc == 2 and "drop --prefix" in out["error"]["message"], out  # type: ignore[index]


def _driver_only(tmp_path: Path, profile: str) -> Path:
    node = tmp_path / "node"
    out, rc = run_json("simulate", profile, str(node), "--driver-only")
    assert rc == 0, out
    return node


def test_a_driver_only_node_has_no_fabric_package_and_run_refuses(tmp_path: Path) -> None:
    node = _driver_only(tmp_path, "dgx-b200")
    for path in ("usr/bin/nv-fabricmanager", "opt/nvidia/nvlsm/sbin/nvlsm", "bin/nvlsm",
                 "usr/share/nvidia/nvswitch/fabricmanager.cfg"):
        assert not os.path.lexists(node / path), path
    assert (node / "usr/bin/nvidia-smi").exists()
    out, rc = run_json("run", "--root", str(node), "--dry-run")
    assert rc == 1, out
    assert {"binary_missing", "nvlsm_missing"} <= {f["code"] for f in out["findings"]}


def test_a_driver_only_node_with_the_image_layout_comes_up_on_its_daemons(
        mirror: Path, tmp_path: Path) -> None:
    """The image path: the node's files are the image's (its fabric at the vendor paths)."""
    node = _driver_only(tmp_path, "dgx-b200")
    fetch(mirror, tmp_path / "artifacts", "x86_64", "nvlink5")
    out, rc = lay_out(tmp_path / "artifacts", node, "x86_64", "nvlink5")
    assert rc == 0, out
    _comes_up(node, {"nvlsm": "/opt/nvidia/nvlsm/sbin/nvlsm",
                     "fabricmanager": "/usr/bin/nv-fabricmanager"})


def test_the_run_time_path_installs_the_loaded_drivers_fabric_then_comes_up(
        mirror: Path, tmp_path: Path) -> None:
    """The connected-cluster path: `install` for the node's loaded driver (no version given)
    into the node's cache, then `run` takes the daemons from the install records."""
    node = _driver_only(tmp_path, "dgx-b200")
    out, rc = run_json("install", "--root", str(node), "--mirror", str(mirror),
                       "--retries", "0")
    assert rc == 0, out
    assert out["driver_version"] == DRIVER and out["fabric"] == "nvlink5"
    assert sorted(i["component"] for i in out["installed"]) == [
        "fabricmanager", "libnvidia_nscq", "libnvsdm", "nvlsm"]
    _comes_up(node, {
        "nvlsm": "/opt/nvfabric/nvlsm-2025.06.6/sbin/nvlsm",
        "fabricmanager": f"/opt/nvfabric/fabricmanager-{DRIVER}/bin/nv-fabricmanager"})


def test_the_run_time_path_never_installs_another_drivers_fabric(tmp_path: Path) -> None:
    mirror = write_mirror(tmp_path / "mirror", stand_in_release("570.158.01"))
    node = _driver_only(tmp_path, "dgx-b200")
    out, rc = run_json("install", "--root", str(node), "--mirror", str(mirror),
                       "--retries", "0")
    assert rc == 1 and out["error"]["code"] == "artifact_not_available", out
    assert not (node / "opt/nvfabric").exists()
    out, rc = run_json("run", "--root", str(node), "--dry-run")
    assert rc == 1 and "binary_missing" in {f["code"] for f in out["findings"]}


def _comes_up(node: Path, daemons: dict[str, str]) -> None:
    run = Run(node, "--json")
    try:
        run.wait_line(r"fabric ready in [0-9.]+ s")
        ready = json.loads((node / "run/nvfabric/ready").read_text())
        assert [s["service"] for s in ready["services"]] == ["nvlsm", "fabricmanager"]
        for service in ready["services"]:
            cmdline = Path(f"/proc/{service['pid']}/cmdline").read_bytes().split(b"\0")
            assert str(node).encode() + daemons[service["service"]].encode() in cmdline, cmdline
        run.signal()
        assert run.wait() == 0, run.log
    finally:
        run.close()
    assert [e["prog"] for e in events(node, event="exec")][:2] == ["nvlsm", "fabricmanager"]
