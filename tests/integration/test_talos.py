"""deploy/talos: the Talos system extension images of both architectures, built with
``make talos-image DRIVER_VERSION=... ARCH=... MIRROR=...`` (the fabric fetched from a local
mirror of stand-in archives, tests/fabrickit.py) FROM scratch with podman, unpacked with skopeo
+ umoci and checked against Talos's own extension rules (tests/talos_rules.py cites them).
The x86_64 image carries the real one-dir build of this checkout and its service runs the way
Talos runs it on a simulated DGX B200 whose files are the extension's root: fabric manager and
NVLSM are the image's own. The aarch64 image is assembled from this x86_64 machine (nothing
of arm64 runs during the build), with Debian's arm64 glibc and a stand-in for the one-dir
build (an aarch64 build is made on aarch64); its layout and spec are checked, not run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import talos_rules as rules
from tests.deploy.test_talos import stand_in_dist
from tests.fabrickit import stand_in_release, write_mirror
from tests.integration.debroot import REPO, arm64_glibc_root, require
from tests.integration.podman import (
    RUN_FLAGS,
    build_talos_image,
    podman,
    storage_ref,
    wait_for,
)

NAME = "nvfabric"
DRIVER = "570.148.08"  # the dgx-b200 profile's driver
CROOT = "rootfs/usr/local/lib/containers/nvfabric"
#: siderolabs/talos internal/app/machined/pkg/system/runner/runner.go DefaultOptions
TALOS_GRACEFUL_SHUTDOWN_S = 10.0


def _container_pids(name: str) -> list[int]:
    """Host pids of every process of container ``name``: its init and all descendants."""
    init = int(podman("inspect", "--format", "{{.State.Pid}}", name).stdout.strip())
    out, todo = [], [init]
    while todo:
        pid = todo.pop()
        out.append(pid)
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as fh:
                todo += [int(c) for c in fh.read().split()]
    return out


def _pyproject_version() -> str:
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise AssertionError("no version in pyproject.toml")


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Stand-in archives of DRIVER whose daemons are launchers run by the image's nvfabric."""
    return write_mirror(tmp_path_factory.mktemp("mirror"),
                        stand_in_release(DRIVER, binary="/usr/bin/nvfabric"))


_BUILT: dict[str, Path] = {}


def _build(arch: str, mirror: Path, tmp: Path) -> Path:
    """The extension image of ``arch`` as an OCI layout (skopeo copy out of the private
    storage), built once per module."""
    if arch in _BUILT:
        return _BUILT[arch]
    require("skopeo", "umoci")
    extra = {}
    if arch == "aarch64":
        extra = {"TALOS_DIST": str(stand_in_dist(tmp, arch)),
                 "TALOS_GLIBC_ROOT": str(arm64_glibc_root(tmp / "glibc"))}
    started = time.monotonic()
    image = build_talos_image(arch, DRIVER, mirror, **extra)
    print(f"\nmake talos-image ARCH={arch}: {time.monotonic() - started:.0f} s")
    out = tmp / "oci"
    subprocess.run(["skopeo", "copy", "--quiet", storage_ref(image), f"oci:{out}:ext"],
                   check=True, timeout=600)
    _BUILT[arch] = out
    return out


def _unpack(layout: Path) -> Path:
    """The image's filesystem as Talos sees an extension: umoci unpack's rootfs (the image
    root, holding manifest.yaml and rootfs/)."""
    bundle = layout.parent / "bundle"
    if not bundle.exists():
        subprocess.run(["umoci", "unpack", "--image", f"{layout}:ext", str(bundle)],
                       check=True, timeout=600, capture_output=True)
    return bundle / "rootfs"


@pytest.fixture(scope="module", params=["x86_64", "aarch64"])
def layout(request: pytest.FixtureRequest, mirror: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(request.param, mirror, tmp_path_factory.mktemp(f"talos-{request.param}"))


@pytest.fixture(scope="module")
def ext(layout: Path) -> Path:
    return _unpack(layout)


@pytest.fixture(scope="module")
def x86_ext(mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _unpack(_build("x86_64", mirror, tmp_path_factory.mktemp("talos-x86_64")))


def _arch(ext: Path) -> str:
    return "aarch64" if (ext / CROOT / "lib/aarch64-linux-gnu").is_dir() else "x86_64"


def _blob(layout: Path, digest: str) -> Any:
    algo, hexd = digest.split(":")
    return json.loads((layout / "blobs" / algo / hexd).read_text())


def test_image_is_from_scratch_one_layer_of_its_architecture(layout: Path, ext: Path) -> None:
    (desc,) = json.loads((layout / "index.json").read_text())["manifests"]
    manifest = _blob(layout, desc["digest"])
    assert len(manifest["layers"]) == 1  # FROM scratch + one COPY: nothing of a base image
    config = _blob(layout, manifest["config"]["digest"])
    assert config["architecture"] == {"x86_64": "amd64", "aarch64": "arm64"}[_arch(ext)]
    assert not (config.get("config") or {}).get("Entrypoint")
    labels = config["config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == f"{_pyproject_version()}-{DRIVER}"
    assert labels["io.nvfabric.driver-version"] == DRIVER
    size = sum(layer["size"] for layer in manifest["layers"])
    print(f"\ntalos extension image {_arch(ext)}: {size / 1e6:.1f} MB compressed layer")


def test_extension_follows_talos_rules(ext: Path) -> None:
    assert rules.check_layout(ext) == []
    assert rules.check_contents(ext / "rootfs") == []
    assert rules.check_services(ext / "rootfs") == []
    meta = yaml.safe_load((ext / "manifest.yaml").read_text())["metadata"]
    assert meta["version"] == f"{_pyproject_version()}-{DRIVER}"
    root = ext / CROOT
    if _arch(ext) == "x86_64":
        # the one-dir build of this checkout, and the fabric of the driver
        built = REPO / "dist/nvfabric-dir/nvfabric"
        assert (root / "usr/lib/nvfabric/nvfabric").read_bytes() == built.read_bytes()
        assert (root / "usr/bin/nv-fabricmanager").is_file()
        assert (root / "opt/nvidia/nvlsm/sbin/nvlsm").is_file()
    else:
        # Debian's arm64 loader and glibc, at the aarch64 paths
        head = (root / "lib/ld-linux-aarch64.so.1").read_bytes()[:20]
        assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == 183
        assert (root / "lib/aarch64-linux-gnu/libc.so.6").is_file()
        assert (root / "usr/bin/nvidia-imex").is_file()
        assert not (root / "usr/bin/nv-fabricmanager").exists()



def test_service_runs_as_talos_runs_it_on_a_simulated_b200(x86_ext: Path,
                                                          tmp_path: Path) -> None:
    """podman stands in for Talos's containerd runner (extension.go): the container root is
    a copy of the extension's /usr/local/lib/containers/nvfabric, read-only; the process is the
    spec's entrypoint and args, its environment the spec's; each bind mount of the spec gets a
    directory of this test as its source, except /dev, /sys and NVML (this machine's are no GPU
    node's). The node (``--root /node``, appended to the args) is a DGX B200 simulated
    ``--driver-only`` by the image's own nvfabric, merged with the extension's root: its files
    are the image's, so fabric manager and NVLSM are the ones the image carries."""
    ext = x86_ext
    spec = yaml.safe_load((ext / "rootfs/usr/local/etc/containers/nvfabric.yaml").read_text())
    image_root = ext / CROOT
    # a private copy of the root: podman's --rootfs may write its mount points into it
    root = tmp_path / "container-root"
    shutil.copytree(image_root, root, symlinks=True)
    node = tmp_path / "node"
    mounts = ["-v", f"{tmp_path}:/work"]
    sources = {}
    for m in spec["container"]["mounts"]:
        if m["destination"] in ("/dev", "/sys") or "libnvidia-ml" in m["source"]:
            continue  # this machine has no GPU node's devices, sysfs or NVIDIA user space
        src = tmp_path / "host" / m["source"].strip("/").replace("/", "_")
        src.mkdir(parents=True)
        sources[m["destination"]] = src
        mounts += ["-v", f"{src}:{m['destination']}"]
    env = [a for e in spec["container"].get("environment", []) for a in ("-e", e)]
    entry = spec["container"]["entrypoint"]
    base = [*RUN_FLAGS, "--read-only", *env, *mounts]
    sim = podman("run", "--rm", *base, "--rootfs", str(root), entry, "simulate", "dgx-b200",
                 "/work/node", "--driver-only", timeout=120)
    assert "written to /work/node" in sim.stdout
    assert not (node / "usr/bin/nv-fabricmanager").exists()
    subprocess.run(["cp", "-a", "-n", f"{image_root}/.", str(node)], check=True, timeout=120)
    for daemon in ("usr/bin/nv-fabricmanager", "opt/nvidia/nvlsm/sbin/nvlsm"):
        assert (node / daemon).read_bytes() == (image_root / daemon).read_bytes()
    name = f"nvfabric-talos-{os.getpid()}"
    try:
        podman("run", "--detach", "--name", name, *base, "--rootfs", str(root), entry,
               *spec["container"]["args"], "--root", "/work/node", timeout=120)
        wait_for(node / "var/run/nvfabric/ready", 90, container=name)
        ready = json.loads((node / "var/run/nvfabric/ready").read_text())
        assert [s["service"] for s in ready["services"]] == ["nvlsm", "fabricmanager"]
        pids = _container_pids(name)
        # the one-dir build is one process: nvfabric itself is the container's PID 1 (it reaps
        # every orphan), after its checks the lean supervisor (the same build re-executed in
        # place), with the image's NVLSM and fabric manager as its children
        init = Path(f"/proc/{pids[0]}/cmdline").read_bytes().split(b"\0")
        assert init[:2] == [b"/usr/bin/nvfabric", b"--supervise-fd"], init
        # each stand-in daemon is a script: the kernel runs its #! program, then its path
        daemons = {Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[2] for p in pids[1:]}
        assert {b"/work/node/opt/nvidia/nvlsm/sbin/nvlsm",
                b"/work/node/usr/bin/nv-fabricmanager"} <= daemons, daemons
        cfg = (node / "var/run/nvfabric/fabricmanager.cfg").read_text()
        # the writable places the spec sets, resolved under --root as every path key is
        assert "\nSTATE_FILE_NAME=/work/node/var/run/nvidia-fabricmanager/fabricmanager.state\n" \
            in cfg
        # nothing is unpacked anywhere: no TMPDIR in the spec, nothing written outside --root
        assert "environment" not in spec["container"]
        assert all(not any(src.iterdir()) for src in sources.values()), sources
        # Talos's stop (runner/containerd/containerd.go Stop): SIGTERM to every process of the
        # container (WithKillAll), SIGKILL to all after GracefulShutdownTimeout, 10 s
        started = time.monotonic()
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        while time.monotonic() - started < TALOS_GRACEFUL_SHUTDOWN_S and \
                json.loads(podman("inspect", name).stdout)[0]["State"]["Running"]:
            time.sleep(0.2)
        took = time.monotonic() - started
        podman("kill", "--signal", "KILL", name, check=False)
        podman("wait", name, check=False)
        state = json.loads(podman("inspect", name).stdout)[0]["State"]
        logs = podman("logs", name)
        text = logs.stdout + logs.stderr
        assert took < TALOS_GRACEFUL_SHUTDOWN_S and state["ExitCode"] == 0, text[-3000:]
        assert "killed by SIGKILL" not in text and "killing what is left" not in text, text
        assert "fabricmanager stopped" in text and "nvlsm stopped" in text
        assert "all services stopped" in text
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)
