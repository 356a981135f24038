"""The Talos system extension of both architectures, assembled as ``make talos-layout`` does
(fetch from a local mirror of stand-in archives, ``install --from --layout vendor``,
packaging/talos/build_extension.py) and checked against Talos's own extension rules
(tests/talos_rules.py cites siderolabs/talos pkg/machinery/extensions): the layout, the
manifest and its version constraint, the allowed paths, the service spec and its
``depends``. The one-dir build and the glibc root are stand-ins here (no PyInstaller build of
aarch64 can be made on this x86_64 machine, and the layout must not depend on the build host);
tests/integration/test_talos.py builds the x86_64 image with the real ones and runs it."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import nvfabric
from tests import talos_rules as rules
from tests.fabrickit import stand_in_release, write_mirror

REPO = Path(__file__).resolve().parents[2]
DRIVER = "570.148.08"
CROOT = "rootfs/usr/local/lib/containers/nvfabric"
MACHINE = {"x86_64": 62, "aarch64": 183}
MULTIARCH = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}
LOADER = {"x86_64": "lib64/ld-linux-x86-64.so.2", "aarch64": "lib/ld-linux-aarch64.so.1"}


def stand_in_dist(tmp: Path, arch: str) -> Path:
    """A one-dir build's shape: an ELF executable of ``arch`` beside ``_internal/``."""
    dist = tmp / f"dist-{arch}"
    (dist / "_internal").mkdir(parents=True)
    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    head[18:20] = MACHINE[arch].to_bytes(2, "little")
    (dist / "nvfabric").write_bytes(bytes(head))
    (dist / "nvfabric").chmod(0o755)
    (dist / "_internal/base_library.zip").write_bytes(b"PK")
    return dist


def stand_in_glibc(tmp: Path, arch: str) -> Path:
    """A glibc root as Debian bookworm lays it out: usr-merged for x86_64, with an absolute
    loader link; the arm64 package tree (mmdebstrap --variant=extract) for aarch64."""
    root = tmp / f"glibc-{arch}"
    if arch == "x86_64":
        lib = root / "usr/lib/x86_64-linux-gnu"
        lib.mkdir(parents=True)
        (root / "usr/lib64").mkdir()
        os.symlink("usr/lib", root / "lib")
        os.symlink("usr/lib64", root / "lib64")
        os.symlink("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
                   root / "usr/lib64/ld-linux-x86-64.so.2")
        (lib / "ld-linux-x86-64.so.2").write_bytes(b"\x7fELF loader x86_64")
    else:
        lib = root / "lib/aarch64-linux-gnu"
        lib.mkdir(parents=True)
        (lib / "ld-linux-aarch64.so.1").write_bytes(b"\x7fELF loader aarch64")
        os.symlink("aarch64-linux-gnu/ld-linux-aarch64.so.1", root / "lib/ld-linux-aarch64.so.1")
    for name in ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
                 "libutil.so.1", "libresolv.so.2", "libnss_files.so.2", "libgcc_s.so.1",
                 "libz.so.1.2.13"):
        (lib / name).write_bytes(f"\x7fELF {name} {arch}".encode())
    os.symlink("libz.so.1.2.13", lib / "libz.so.1")
    return root


def make_layout(tmp: Path, arch: str, dist: Path | None = None) -> subprocess.CompletedProcess[str]:
    mirror = tmp / "mirror"
    if not mirror.exists():
        write_mirror(mirror, stand_in_release(DRIVER, binary="/usr/bin/nvfabric"))
    return subprocess.run(
        ["make", "-s", "talos-layout", f"DRIVER_VERSION={DRIVER}", f"ARCH={arch}",
         f"MIRROR={mirror}", f"TALOS_DIST={dist or stand_in_dist(tmp, arch)}",
         f"TALOS_GLIBC_ROOT={stand_in_glibc(tmp, arch)}", f"TALOS_EXT={tmp / 'ext'}",
         f"TALOS_ARTIFACTS={tmp / 'artifacts'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module", params=["x86_64", "aarch64"])
def ext(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp(f"talos-{request.param}")
    done = make_layout(tmp, request.param)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp / "ext"


def arch_of(ext: Path) -> str:
    return "aarch64" if (ext / CROOT / "lib/aarch64-linux-gnu").is_dir() else "x86_64"


def spec_of(ext: Path) -> dict[str, Any]:
    spec = yaml.safe_load((ext / "rootfs/usr/local/etc/containers/nvfabric.yaml").read_text())
    assert isinstance(spec, dict)
    return spec


def test_layout_manifest_and_version_constraint_follow_load_go(ext: Path) -> None:
    assert rules.check_layout(ext) == []
    meta = yaml.safe_load((ext / "manifest.yaml").read_text())["metadata"]
    assert meta["name"] == "nvfabric"
    assert meta["version"] == f"{nvfabric.__version__}-{DRIVER}"
    assert f"driver {DRIVER}, {arch_of(ext)}" in meta["description"]
    constraint = meta["compatibility"]["talos"]["version"]
    assert rules.satisfies(constraint, "v1.9.0") and rules.satisfies(constraint, "v1.11.2")
    assert not rules.satisfies(constraint, "v1.8.3")


def test_every_path_is_allowed_and_nothing_is_world_writable(ext: Path) -> None:
    assert rules.check_contents(ext / "rootfs") == []
    # no shell: the entrypoint is the build itself, the stand-in daemons' shebang too
    root = ext / CROOT
    assert not (root / "bin/sh").exists() and not (root / "usr/bin/sh").exists()


def test_the_service_spec_follows_services_go_and_waits_for_nvml(ext: Path) -> None:
    assert rules.check_services(ext / "rootfs") == []
    spec = spec_of(ext)
    assert spec["name"] == "nvfabric" and spec["restart"] == "always"
    assert spec["container"]["entrypoint"] == "/usr/bin/nvfabric"
    assert spec["container"]["args"][:1] == ["run"] and "--stay" in spec["container"]["args"]
    depends = spec["depends"]
    for dep in ({"service": "cri"}, {"service": "udevd"}, {"path": "/sys/bus/pci/drivers/nvidia"},
                {"path": "/usr/local/lib/libnvidia-ml.so.1"}):
        assert dep in depends
    root = ext / CROOT
    (nvml,) = [m for m in spec["container"]["mounts"] if "libnvidia-ml" in m["source"]]
    dest = root / nvml["destination"].lstrip("/")
    assert nvml["destination"] == f"/lib/{MULTIARCH[arch_of(ext)]}/libnvidia-ml.so.1"
    assert dest.parent.joinpath("libc.so.6").is_file(), "where this root's loader looks"
    assert "ro" in nvml["options"]
    # every mount point exists in the read-only root
    for m in spec["container"]["mounts"]:
        if m is not nvml:
            assert (root / m["destination"].lstrip("/")).is_dir(), m["destination"]


def test_the_binary_runs_on_the_loader_and_glibc_of_the_target(ext: Path) -> None:
    arch = arch_of(ext)
    root = ext / CROOT
    assert (root / LOADER[arch]).read_bytes() == f"\x7fELF loader {arch}".encode()
    assert (root / f"lib/{MULTIARCH[arch]}/libz.so.1").read_bytes() == \
        f"\x7fELF libz.so.1.2.13 {arch}".encode()  # a link's file, copied
    other = "aarch64" if arch == "x86_64" else "x86_64"
    assert not (root / f"lib/{MULTIARCH[other]}").exists() and not (root / LOADER[other]).exists()
    assert os.readlink(root / "usr/bin/nvfabric") == "../lib/nvfabric/nvfabric"
    assert (root / "usr/lib/nvfabric/_internal").is_dir()
    assert stat.S_IMODE((root / "usr/lib/nvfabric/nvfabric").stat().st_mode) == 0o755


def test_the_fabric_of_the_driver_is_inside_at_its_vendor_paths(ext: Path) -> None:
    root = ext / CROOT
    if arch_of(ext) == "x86_64":
        wanted = ["usr/bin/nv-fabricmanager", "opt/nvidia/nvlsm/sbin/nvlsm",
                  "usr/share/nvidia/nvswitch/fabricmanager.cfg",
                  "usr/share/nvidia/nvlsm/nvlsm.conf",
                  f"usr/lib/x86_64-linux-gnu/libnvidia-nscq.so.{DRIVER}",
                  f"usr/lib/x86_64-linux-gnu/libnvsdm.so.{DRIVER}"]
        absent = ["usr/bin/nvidia-imex"]
    else:
        wanted = ["usr/bin/nvidia-imex", "usr/bin/nvidia-imex-ctl", "etc/nvidia-imex/config.cfg"]
        absent = ["usr/bin/nv-fabricmanager", "opt/nvidia/nvlsm"]
    for rel in wanted:
        assert (root / rel).is_file(), rel
    for rel in absent:
        assert not (root / rel).exists(), rel
    for rel in wanted[:2]:
        assert (root / rel).read_text().startswith("#!/usr/bin/nvfabric ")  # the stand-ins
    assert (root / "usr/share/nvfabric/fabric.json").is_file()


def test_every_mount_says_why_it_is_there() -> None:
    for arch in ("x86_64", "aarch64"):
        lines = (REPO / f"deploy/talos/nvfabric-{arch}.yaml").read_text().splitlines()
        starts = [n for n, ln in enumerate(lines) if ln.strip().startswith("- source:")]
        assert starts
        for n in starts:
            assert lines[n - 1].strip().startswith("#"), (arch, lines[n])
        spec = yaml.safe_load("\n".join(lines))
        sources = {m["source"] for m in spec["container"]["mounts"]}
        # no whole /var/run or /var/log of the host (containerd's and the CRI's sockets)
        assert not sources & {"/var/run", "/run", "/var/log", "/var"}, sources


def test_a_build_of_another_architecture_is_refused(tmp_path: Path) -> None:
    done = make_layout(tmp_path, "aarch64", dist=stand_in_dist(tmp_path, "x86_64"))
    assert done.returncode != 0
    assert "is ELF machine 62, not aarch64's 183" in done.stderr


def test_driver_version_is_required(tmp_path: Path) -> None:
    done = subprocess.run(["make", "-s", "talos-layout", f"TALOS_DIST={tmp_path}",
                           f"TALOS_EXT={tmp_path / 'ext'}"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode != 0 and "give DRIVER_VERSION=" in done.stderr
    assert not (tmp_path / "ext").exists()


def test_a_file_mount_without_depends_path_is_refused(tmp_path: Path) -> None:
    spec = yaml.safe_load((REPO / "deploy/talos/nvfabric-x86_64.yaml").read_text())
    assert rules.check_mount_sources(spec, "x") == []
    spec["depends"] = [d for d in spec["depends"] if "libnvidia-ml" not in str(d)]
    (found,) = rules.check_mount_sources(spec, "x")
    assert re.search(r"/usr/local/lib/libnvidia-ml\.so\.1 is neither writable on Talos nor",
                     found)


def _tree(tmp: Path) -> Path:
    ext = tmp / "ext"
    (ext / "rootfs/usr/local/etc/containers").mkdir(parents=True)
    (ext / "rootfs/usr/local/lib/containers/x/usr/bin").mkdir(parents=True)
    (ext / "manifest.yaml").write_text(yaml.safe_dump({"version": "v1alpha1", "metadata": {
        "name": "x", "version": "1", "author": "a", "description": "d",
        "compatibility": {"talos": {"version": ">= v1.9.0"}}}}))
    entry = ext / "rootfs/usr/local/lib/containers/x/usr/bin/x"
    entry.write_bytes(b"\x7fELF")
    entry.chmod(0o755)
    return ext


GOOD_SPEC: dict[str, Any] = {"name": "x", "container": {"entrypoint": "/usr/bin/x"},
                             "depends": [{"service": "cri"}], "restart": "always"}


@pytest.mark.parametrize(("change", "error"), [
    ({"name": "X Y"}, "name 'X Y' is invalid"),
    ({"restart": "sometimes"}, "restart kind is invalid"),
    ({"container": {"entrypoint": ""}}, "container endpoint can't be empty"),
    ({"depends": [{"service": "cri", "path": "/x"}]}, "more than a single dependency is set"),
    ({"depends": [{}]}, "no dependency specified"),
    ({"depends": [{"path": "sys/bus"}]}, "path is not absolute"),
    ({"depends": [{"network": ["online"]}]}, "invalid network dependency"),
    ({"depend": [{"service": "cri"}]}, "unknown key 'depend'"),
    ({"container": {"entrypoint": "/usr/bin/missing"}}, "is not an executable file"),
])
def test_service_rules_reject_each_broken_spec(tmp_path: Path, change: dict[str, Any],
                                               error: str) -> None:
    ext = _tree(tmp_path)
    spec_path = ext / "rootfs/usr/local/etc/containers/x.yaml"
    spec_path.write_text(yaml.safe_dump(GOOD_SPEC))
    assert rules.check_services(ext / "rootfs") == []
    spec_path.write_text(yaml.safe_dump({**GOOD_SPEC, **change}))
    found = rules.check_services(ext / "rootfs")
    assert any(error in e for e in found), found


def test_content_and_layout_rules_reject_each_broken_tree(tmp_path: Path) -> None:
    ext = _tree(tmp_path)
    assert rules.check_contents(ext / "rootfs") == [] and rules.check_layout(ext) == []
    (ext / "rootfs/etc").mkdir()
    (ext / "rootfs/etc/motd").write_text("x")  # outside AllowedPaths
    os.mkfifo(ext / "rootfs/usr/local/fifo")
    wr = ext / "rootfs/usr/local/lib/containers/x/usr/bin/x"
    wr.chmod(wr.stat().st_mode | stat.S_IWOTH)
    found = rules.check_contents(ext / "rootfs")
    assert "path '/etc/motd' is not allowed in extensions" in found
    assert "special files are not allowed: '/usr/local/fifo'" in found
    assert any(e.startswith("world-writeable files are not allowed") for e in found)
    (ext / "extra").write_text("x")
    (ext / "manifest.yaml").write_text("version: v1alpha2\nmetadata: {name: x}\n")
    found = rules.check_layout(ext)
    assert "unexpected file 'extra'" in found
    assert "unsupported manifest version: 'v1alpha2'" in found
    assert "metadata.author is missing" in found
    with pytest.raises(ValueError):
        rules.satisfies(">= banana", "v1.9.0")


