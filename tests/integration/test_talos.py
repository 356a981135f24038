"""deploy/talos: the Talos system extension image, built FROM scratch with podman, unpacked
with skopeo + umoci, checked against Talos's own extension rules (tests/integration/
talos_rules.py cites them), and its service run the way Talos runs it: the container root
``/usr/local/lib/containers/nvfabric`` read-only, the spec's entrypoint, args, environment and
mounts, on a simulated DGX B200."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration import talos_rules as rules
from tests.integration.debroot import REPO, require
from tests.integration.distbin import dist_binary
from tests.integration.podman import (
    RUN_FLAGS,
    build_talos_image,
    podman,
    storage_ref,
    wait_for,
)

NAME = "nvfabric"
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
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The extension image as an OCI layout (skopeo copy out of the private storage)."""
    require("skopeo", "umoci")
    dist_binary()  # `make dist` under its own lock first
    image = build_talos_image()
    out = tmp_path_factory.mktemp("talos-oci") / "oci"
    subprocess.run(["skopeo", "copy", "--quiet", storage_ref(image), f"oci:{out}:ext"],
                   check=True, timeout=600)
    return out


@pytest.fixture(scope="module")
def ext(layout: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's filesystem as Talos sees an extension: umoci unpack's rootfs (the image
    root, holding manifest.yaml and rootfs/)."""
    bundle = tmp_path_factory.mktemp("talos-bundle") / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:ext", str(bundle)], check=True,
                   timeout=600, capture_output=True)
    return bundle / "rootfs"


def _blob(layout: Path, digest: str) -> Any:
    algo, hexd = digest.split(":")
    return json.loads((layout / "blobs" / algo / hexd).read_text())


def test_image_is_from_scratch_one_layer_no_entrypoint(layout: Path) -> None:
    (desc,) = json.loads((layout / "index.json").read_text())["manifests"]
    manifest = _blob(layout, desc["digest"])
    assert len(manifest["layers"]) == 1  # FROM scratch + one COPY: nothing of a base image
    config = _blob(layout, manifest["config"]["digest"])
    assert "Entrypoint" not in config.get("config", {}) or not config["config"]["Entrypoint"]
    assert config["config"]["Labels"]["org.opencontainers.image.version"] == _pyproject_version()
    stat_out = json.loads(subprocess.run(
        ["umoci", "stat", "--image", f"{layout}:ext", "--json"], capture_output=True,
        text=True, check=True, timeout=60).stdout)
    created_by = [h.get("created_by", "") for h in stat_out["history"]]
    assert not any("FROM " in c and "scratch" not in c for c in created_by), created_by
    size = sum(layer["size"] for layer in manifest["layers"])
    print(f"\ntalos extension image: {size / 1e6:.1f} MB compressed layer")


def test_extension_layout_and_manifest_follow_load_go(ext: Path) -> None:
    assert rules.check_layout(ext) == []
    meta = yaml.safe_load((ext / "manifest.yaml").read_text())["metadata"]
    assert meta["name"] == NAME
    assert meta["version"] == _pyproject_version()
    constraint = meta["compatibility"]["talos"]["version"]
    assert rules.satisfies(constraint, "v1.9.0") and rules.satisfies(constraint, "v1.11.2")
    assert not rules.satisfies(constraint, "v1.8.3")


def test_rootfs_contents_follow_validate_go(ext: Path) -> None:
    assert rules.check_contents(ext / "rootfs") == []
    # no shell: the entrypoint is the binary itself, its fake daemons' shebang is the binary
    root = ext / "rootfs" / "usr/local/lib/containers" / NAME
    assert not (root / "bin" / "sh").exists() and not (root / "usr/bin/sh").exists()


def test_service_spec_follows_services_go(ext: Path) -> None:
    assert rules.check_services(ext / "rootfs") == []
    spec = yaml.safe_load((ext / "rootfs/usr/local/etc/containers/nvfabric.yaml").read_text())
    assert spec["name"] == NAME and spec["restart"] == "always"
    assert spec["container"]["entrypoint"] == "/usr/local/bin/nvfabric"
    assert spec["container"]["args"][0] == "run"
    assert {"service": "cri"} in spec["depends"] and {"service": "udevd"} in spec["depends"]
    assert {"path": "/sys/bus/pci/drivers/nvidia"} in spec["depends"]
    dests = {m["destination"] for m in spec["container"]["mounts"]}
    assert {"/dev", "/sys", "/var/run", "/var/log"} <= dests
    # NVML bound where the container root's own loader finds it (its glibc's multiarch dir)
    root = ext / "rootfs/usr/local/lib/containers/nvfabric"
    (nvml,) = [m for m in spec["container"]["mounts"] if "libnvidia-ml" in m["source"]]
    assert (root / nvml["destination"].lstrip("/")).parent.joinpath("libc.so.6").is_file()
    # the binary in the image is the one `make dist` built
    entry = ext / "rootfs/usr/local/lib/containers/nvfabric/usr/local/bin/nvfabric"
    assert entry.read_bytes() == dist_binary().read_bytes()


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


def test_service_runs_as_talos_runs_it_on_a_simulated_b200(ext: Path, tmp_path: Path) -> None:
    """podman stands in for Talos's containerd runner (extension.go): the container root is
    the extension's /usr/local/lib/containers/nvfabric, read-only; the process is the spec's
    entrypoint and args, its environment the spec's; each bind mount of the spec gets a
    directory of this test as its source, except /dev, /sys and NVML (this machine's are no GPU
    node's; the simulated node is passed as --root, appended to the args)."""
    spec = yaml.safe_load((ext / "rootfs/usr/local/etc/containers/nvfabric.yaml").read_text())
    # a private copy of the root: podman's --rootfs may write its mount points into it
    root = tmp_path / "container-root"
    shutil.copytree(ext / "rootfs/usr/local/lib/containers" / NAME, root, symlinks=True)
    node = tmp_path / "node"
    node.mkdir()
    mounts = ["-v", f"{node}:/node"]
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
                 "/node", timeout=120)
    assert "written to /node" in sim.stdout
    assert (node / "bin/nvlsm").read_text().startswith("#!/usr/local/bin/nvfabric ")
    name = f"nvfabric-talos-{os.getpid()}"
    try:
        podman("run", "--detach", "--name", name, *base, "--rootfs", str(root), entry,
               *spec["container"]["args"], "--root", "/node", timeout=120)
        wait_for(node / "var/run/nvfabric/ready", 90, container=name)
        ready = json.loads((node / "var/run/nvfabric/ready").read_text())
        assert [s["service"] for s in ready["services"]] == ["nvlsm", "fabricmanager"]
        cfg = (node / "var/run/nvfabric/fabricmanager.cfg").read_text()
        # the writable places the spec sets, resolved under --root as every path key is
        assert "\nSTATE_FILE_NAME=/node/var/run/nvidia-fabricmanager/fabricmanager.state\n" in cfg
        # the one-file binary unpacks under the spec's TMPDIR (the root is read-only)
        assert any(p.name.startswith("_MEI") for p in sources["/var/run"].iterdir())
        # Talos's stop (runner/containerd/containerd.go Stop): SIGTERM to every process of the
        # container (WithKillAll), SIGKILL to all after GracefulShutdownTimeout, 10 s
        pids = _container_pids(name)
        # nvfabric's own unpacked copy: where its interpreter (pids[1], the bootloader's child)
        # maps its libraries from
        with open(f"/proc/{pids[1]}/maps", encoding="utf-8") as fh:
            mei = {m.group(1) for m in re.finditer(r"/var/run/(_MEI\w+)/", fh.read())}
        assert len(mei) == 1, mei
        # the bootloader and nvfabric, the fake NVLSM and fabric manager (each a script run by
        # the one-file binary: its bootloader and itself)
        assert len(pids) >= 4, pids
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
        # and the unpacked copies are gone with their processes
        # (the fake daemons here are scripts of the one-file binary too: a bootloader of theirs
        # hit by both SIGTERMs may leave its copy; NVIDIA's daemons are no such binaries)
        assert not (sources["/var/run"] / mei.pop()).exists()
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)
