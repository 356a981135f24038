"""The container images of deploy/container/Containerfile, built and run with the real podman.

The images are built on a bookworm root made by mmdebstrap (no registry is reachable, no
Python in it): ``make image`` (the one-dir build alone) runs ``nvfabric run`` as PID 1 on a
simulated DGX B200 bind-mounted as its ``--root``, reaches ready, stops fabric manager then
NVLSM on ``podman stop``, leaves no daemon behind when it is killed, and its OCI layout is
checked by skopeo and umoci. ``make image DRIVER_VERSION=...`` (the fabric of that driver
inside, fetched from a local mirror of stand-in archives, tests/fabrickit.py) brings a
driver-only node up on its own fabric manager and NVLSM; the run-time path (``nvfabric
install`` for the node's loaded driver into the node's cache, then ``run``) brings one up from
the image without fabric, and refuses a driver the mirror does not carry.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fabrickit import stand_in_release, write_mirror
from tests.integration.debroot import REPO, require
from tests.integration.podman import (
    RUN_FLAGS,
    alive,
    build_driver_image,
    children,
    export_root,
    host_pid,
    inspect,
    podman,
    simulate_in_image,
    storage_ref,
    wait_for,
)

GRACE_S = 5.0
DRIVER = "570.148.08"  # the dgx-b200 profile's driver


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Stand-in archives of DRIVER whose daemons are launchers run by the image's nvfabric."""
    return write_mirror(tmp_path_factory.mktemp("mirror"),
                        stand_in_release(DRIVER, binary="/usr/bin/nvfabric"))


@pytest.fixture(scope="module")
def driver_image(mirror: Path) -> str:
    """``make image DRIVER_VERSION=DRIVER MIRROR=...``."""
    started = time.monotonic()
    image = build_driver_image(DRIVER, mirror)
    print(f"\nmake image DRIVER_VERSION={DRIVER}: {time.monotonic() - started:.0f} s")
    return image


@pytest.fixture
def container_name() -> Iterator[str]:
    name = f"nvfabric-test-{uuid.uuid4().hex[:10]}"
    yield name
    podman("rm", "--force", "--time", "0", name, check=False)


def _version() -> str:
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise AssertionError("no version in pyproject.toml")


def test_image_entrypoint_is_nvfabric_in_exec_form_with_oci_labels(nvfabric_image: str) -> None:
    config = inspect("image", nvfabric_image)["Config"]
    # exec form: the kernel runs the one-dir build (through its link); no /bin/sh -c anywhere
    # between the runtime and nvfabric.
    assert config["Entrypoint"] == ["/usr/bin/nvfabric"]
    assert config["Cmd"] == ["run", "--root", "/"]
    assert config.get("StopSignal") == "SIGTERM"
    labels = config["Labels"]
    assert labels["org.opencontainers.image.title"] == "nvfabric"
    assert labels["org.opencontainers.image.version"] == _version()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert labels["org.opencontainers.image.revision"] == head
    assert labels["org.opencontainers.image.base.name"].startswith("localhost/nvfabric-test-base")
    assert labels["org.opencontainers.image.created"] != "1970-01-01T00:00:00Z"
    out = podman("run", "--rm", *RUN_FLAGS, nvfabric_image, "--version").stdout
    assert _version() in out
    assert labels["io.nvfabric.driver-version"] == ""  # no fabric inside
    # no Python in the image: nvfabric is the one-dir build, its libraries beside it
    listing = podman("run", "--rm", *RUN_FLAGS, "--entrypoint", "/bin/sh", nvfabric_image, "-c",
                     "readlink /usr/bin/nvfabric; ls /usr/lib/nvfabric; "
                     "command -v python3 || echo no-python").stdout.split()
    assert listing == ["../lib/nvfabric/nvfabric", "_internal", "nvfabric", "no-python"], listing


def test_run_on_simulated_b200_ready_as_pid1_then_podman_stop_in_order(
        nvfabric_image: str, container_name: str, tmp_path: Path) -> None:
    node = simulate_in_image(nvfabric_image, tmp_path / "node")
    shebang = (node / "bin" / "nvlsm").read_text().splitlines()[0]
    assert shebang == "#!/usr/lib/nvfabric/nvfabric --nvfabric-sim-fake"  # sys.executable
    podman("run", "--detach", "--name", container_name, *RUN_FLAGS, "--read-only",
           "-v", f"{node}:/node", nvfabric_image,
           "run", "--root", "/node", "--grace", str(GRACE_S))
    ready_file = node / "run" / "nvfabric" / "ready"
    wait_for(ready_file, 60, container=container_name)
    ready = json.loads(ready_file.read_text())
    assert ready["fabric"] == "nvlink5"
    assert [s["service"] for s in ready["services"]] == ["nvlsm", "fabricmanager"]
    assert ready["management_port"]["guid"] == "0xe09d730300e400e8"

    pid1 = host_pid(container_name)
    nspid = [ln for ln in Path(f"/proc/{pid1}/status").read_text().splitlines()
             if ln.startswith("NSpid:")][0].split()
    assert nspid[-1] == "1"  # nvfabric is PID 1 of the container's pid namespace
    cmdline = Path(f"/proc/{pid1}/cmdline").read_bytes().split(b"\0")
    # `nvfabric run` after its checks execs into the lean supervisor, same pid (README "The
    # supervising process"): the one-dir build again, still shown as the image's nvfabric
    assert cmdline[:2] == [b"/usr/bin/nvfabric", b"--supervise-fd"], cmdline
    daemons = children(pid1)
    assert len(daemons) == 2

    started = time.monotonic()
    podman("stop", "--time", str(int(GRACE_S * 2 + 5)), container_name, timeout=60)
    took = time.monotonic() - started
    state = inspect("container", container_name)["State"]
    assert state["ExitCode"] == 0, podman("logs", container_name).stderr[-2000:]
    assert took < GRACE_S * 2, f"podman stop took {took:.1f} s: the stop was not orderly"
    assert not any(alive(p) for p in daemons)
    logs = podman("logs", container_name)
    text = logs.stdout + logs.stderr
    order = [text.index(s) for s in (
        "nvfabric: fabric ready in",
        "nvfabric: received SIGTERM: stopping in reverse start order",
        "nvfabric: fabricmanager stopped (exited with code 0)",
        "nvfabric: nvlsm stopped (exited with code 0)",
        "nvfabric: all services stopped")]
    assert order == sorted(order), text[-3000:]
    assert not (node / "run" / "nvfabric" / "ready").exists()


def test_tree_simulated_on_the_host_is_refused_naming_the_missing_interpreter(
        nvfabric_image: str, tmp_path: Path) -> None:
    """A tree simulated by the host's nvfabric has fakes whose #! names the host's Python,
    absent in the image (as a host fabric manager's glibc loader would be in a bare image):
    the preflight says which interpreter is missing instead of a bare 'No such file'."""
    node = tmp_path / "node"
    subprocess.run([sys.executable, "-m", "nvfabric", "simulate", "dgx-b200", str(node)],
                   check=True, capture_output=True, timeout=120)
    out = podman("run", "--rm", *RUN_FLAGS, "-v", f"{node}:/node", nvfabric_image, "run",
                 "--root", "/node", "--dry-run", "--json", check=False)
    assert out.returncode == 1, out.stderr
    (missing,) = [f for f in json.loads(out.stdout)["findings"] if f["code"] == "binary_missing"]
    assert missing["message"] == (
        "cannot run /node/usr/bin/nv-fabricmanager --version: No such file or directory: its "
        f"interpreter {sys.executable} (#! line) does not exist here")
    assert "simulate a tree with the nvfabric that will run it" in missing["hint"]


def test_podman_kill_of_pid1_leaves_no_daemon(
        nvfabric_image: str, container_name: str, tmp_path: Path) -> None:
    node = simulate_in_image(nvfabric_image, tmp_path / "node")
    podman("run", "--detach", "--name", container_name, *RUN_FLAGS,
           "-v", f"{node}:/node", nvfabric_image, "run", "--root", "/node")
    wait_for(node / "run" / "nvfabric" / "ready", 60, container=container_name)
    daemons = children(host_pid(container_name))
    assert len(daemons) == 2
    podman("kill", "--signal", "KILL", container_name)
    podman("wait", container_name, timeout=60)
    deadline = time.monotonic() + 10
    while any(alive(p) for p in daemons) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in daemons)
    assert inspect("container", container_name)["State"]["ExitCode"] == 137


def test_sigkill_of_nvfabric_in_host_pid_namespace_stops_daemons_by_pdeathsig(
        nvfabric_image: str, container_name: str, tmp_path: Path) -> None:
    """In the host's pid namespace (as the DaemonSet runs, hostPID) nvfabric is not PID 1 of
    its own namespace, so no namespace teardown kills the daemons for it: when nvfabric is
    SIGKILLed only PR_SET_PDEATHSIG (SIGTERM) stops them. The fake NVLSM removes its pid file
    and IPC socket only on its SIGTERM path, which tells that stop from a SIGKILL."""
    node = simulate_in_image(nvfabric_image, tmp_path / "node")
    podman("run", "--detach", "--pid", "host", "--name", container_name, *RUN_FLAGS,
           "-v", f"{node}:/node", nvfabric_image, "run", "--root", "/node")
    wait_for(node / "run" / "nvfabric" / "ready", 60, container=container_name)
    nvfabric_pid = host_pid(container_name)
    daemons = children(nvfabric_pid)
    assert len(daemons) == 2
    pid_file = node / "var" / "run" / "nvlsm.pid"
    socket_file = node / "var" / "run" / "nvidia-fabricmanager" / "fm_sm_ipc.socket"
    assert pid_file.exists() and socket_file.exists()
    os.kill(nvfabric_pid, signal.SIGKILL)  # our own container's process, by its pid
    deadline = time.monotonic() + 10
    while any(alive(p) for p in daemons) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(alive(p) for p in daemons)
    assert not pid_file.exists() and not socket_file.exists(), "NVLSM did not exit on SIGTERM"


def test_second_fabric_manager_from_another_container_is_refused_in_host_pid_namespace(
        nvfabric_image: str, container_name: str, tmp_path: Path) -> None:
    """As with the GPU Operator's driver container: another container of the node already runs
    fabric manager (here an nvfabric run with a state dir of its own, so its lock is not ours).
    The DaemonSet's container, in the host pid namespace, refuses before it touches anything."""
    node = simulate_in_image(nvfabric_image, tmp_path / "node", profile="hgx-h100")
    podman("run", "--detach", "--pid", "host", "--name", container_name, *RUN_FLAGS,
           "-v", f"{node}:/node", nvfabric_image,
           "run", "--root", "/node", "--state-dir", "/run/other-starter")
    wait_for(node / "run" / "other-starter" / "ready", 60, container=container_name)
    second = podman("run", "--rm", "--pid", "host", *RUN_FLAGS, "-v", f"{node}:/node",
                    nvfabric_image, "run", "--root", "/node", "--json", check=False)
    assert second.returncode == 1, second.stderr
    out = json.loads(second.stdout)
    assert out["result"] == "refused"
    (running,) = [f for f in out["findings"] if f["code"] == "fabric_service_running"]
    assert running["service"] == "fabricmanager" and running["severity"] == "error"
    assert isinstance(running["pid"], int) and "already running" in running["message"]
    assert not (node / "run" / "nvfabric" / "ready").exists()
    podman("stop", "--time", "15", container_name, timeout=60)


def test_oci_layout_checked_by_skopeo_and_umoci(nvfabric_image: str, tmp_path: Path) -> None:
    require("skopeo", "umoci")
    layout = tmp_path / "oci"
    subprocess.run(["skopeo", "copy", "--quiet", storage_ref(nvfabric_image),
                    f"oci:{layout}:nvfabric"], check=True, timeout=600)
    index = json.loads((layout / "index.json").read_text())
    assert index["schemaVersion"] == 2
    tags = subprocess.run(["umoci", "ls", "--layout", str(layout)], capture_output=True,
                          text=True, check=True, timeout=60).stdout.split()
    assert tags == ["nvfabric"]
    stat = json.loads(subprocess.run(
        ["umoci", "stat", "--image", f"{layout}:nvfabric", "--json"], capture_output=True,
        text=True, check=True, timeout=60).stdout)
    assert stat["history"], stat
    # the manifest and every layer are content-addressed blobs of the layout, sizes as recorded
    (desc,) = index["manifests"]
    algo, digest = desc["digest"].split(":")
    manifest = json.loads((layout / "blobs" / algo / digest).read_text())
    sizes = []
    for layer in manifest["layers"]:
        a, d = layer["digest"].split(":")
        blob = layout / "blobs" / a / d
        assert blob.stat().st_size == layer["size"]
        sizes.append(layer["size"])
    config = json.loads((layout / "blobs" / algo /
                         manifest["config"]["digest"].split(":")[1]).read_text())
    assert config["config"]["Entrypoint"] == ["/usr/bin/nvfabric"]
    # the image is the base plus one layer: the one-dir build
    assert len(manifest["layers"]) == 2
    size = inspect("image", nvfabric_image)["Size"]
    print(f"\nimage size: {size / 1e6:.0f} MB uncompressed; layers {[s // 1000 for s in sizes]} kB")


def _fabric_daemons(name: str) -> set[bytes]:
    """The script path of each daemon nvfabric runs in container ``name`` (the stand-ins are
    scripts: the kernel runs their #! program, then the path)."""
    return {Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[2]
            for p in children(host_pid(name))}


def test_the_driver_image_is_tagged_with_its_driver_and_carries_its_fabric(
        driver_image: str) -> None:
    assert driver_image.endswith(f"-{DRIVER}")
    labels = inspect("image", driver_image)["Config"]["Labels"]
    assert labels["io.nvfabric.driver-version"] == DRIVER
    listing = podman("run", "--rm", *RUN_FLAGS, "--entrypoint", "/bin/sh", driver_image, "-c",
                     "ls /usr/bin/nv-fabricmanager /opt/nvidia/nvlsm/sbin/nvlsm "
                     "/usr/share/nvidia/nvswitch/fabricmanager.cfg "
                     f"/usr/lib/x86_64-linux-gnu/libnvidia-nscq.so.{DRIVER} "
                     "/usr/share/nvfabric/fabric.json").stdout.split()
    assert len(listing) == 5, listing
    size = inspect("image", driver_image)["Size"]
    print(f"\nimage {driver_image}: {size / 1e6:.0f} MB uncompressed")


def test_the_driver_image_brings_a_driver_only_node_up_on_its_own_fabric(
        driver_image: str, container_name: str, tmp_path: Path) -> None:
    """The node is the image's root filesystem with a DGX B200's hardware and driver under it
    (simulated --driver-only by the image itself: no fabric manager, NVLSM or their configs):
    what the container sees on a GPU node with --root / and the host's /sys and /dev. Nothing
    else is supplied: the daemons that come up are the image's."""
    node = simulate_in_image(driver_image, tmp_path / "node", "dgx-b200", "--driver-only")
    assert not (node / "usr/bin/nv-fabricmanager").exists()
    image_root = export_root(driver_image, tmp_path / "image-root")
    subprocess.run(["cp", "-a", "-n", f"{image_root}/.", str(node)], check=True, timeout=300)
    podman("run", "--detach", "--name", container_name, *RUN_FLAGS, "--read-only",
           "-v", f"{node}:/node", driver_image, "run", "--root", "/node", "--grace", str(GRACE_S))
    wait_for(node / "run/nvfabric/ready", 60, container=container_name)
    ready = json.loads((node / "run/nvfabric/ready").read_text())
    assert [s["service"] for s in ready["services"]] == ["nvlsm", "fabricmanager"]
    assert _fabric_daemons(container_name) == {b"/node/opt/nvidia/nvlsm/sbin/nvlsm",
                                               b"/node/usr/bin/nv-fabricmanager"}
    podman("stop", "--time", str(int(GRACE_S * 2 + 5)), container_name, timeout=60)
    assert inspect("container", container_name)["State"]["ExitCode"] == 0


def test_the_run_time_path_installs_the_loaded_drivers_fabric_then_comes_up(
        nvfabric_image: str, mirror: Path, container_name: str, tmp_path: Path) -> None:
    """The image without fabric on a driver-only node: `install` (what the DaemonSet's init
    container of deploy/kubernetes/components/fetch-at-start runs) resolves the loaded driver,
    fetches and verifies its archives and installs them into the node's cache; `run` then comes
    up on exactly those daemons."""
    node = simulate_in_image(nvfabric_image, tmp_path / "node", "dgx-b200", "--driver-only")
    out = podman("run", "--rm", *RUN_FLAGS, "--read-only", "-v", f"{node}:/node",
                 "-v", f"{mirror}:/mirror:ro", nvfabric_image, "install", "--root", "/node",
                 "--mirror", "/mirror", "--retries", "0", "--json", check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    done = json.loads(out.stdout)
    assert done["driver_version"] == DRIVER and done["fabric"] == "nvlink5"
    podman("run", "--detach", "--name", container_name, *RUN_FLAGS, "--read-only",
           "-v", f"{node}:/node", nvfabric_image, "run", "--root", "/node")
    wait_for(node / "run/nvfabric/ready", 60, container=container_name)
    assert _fabric_daemons(container_name) == {
        b"/node/opt/nvfabric/nvlsm-2025.06.6/sbin/nvlsm",
        f"/node/opt/nvfabric/fabricmanager-{DRIVER}/bin/nv-fabricmanager".encode()}
    podman("stop", "--time", "25", container_name, timeout=60)


def test_the_run_time_path_never_runs_another_drivers_fabric(
        nvfabric_image: str, tmp_path: Path) -> None:
    other = write_mirror(tmp_path / "mirror", stand_in_release("570.158.01",
                                                               binary="/usr/bin/nvfabric"))
    node = simulate_in_image(nvfabric_image, tmp_path / "node", "dgx-b200", "--driver-only")
    out = podman("run", "--rm", *RUN_FLAGS, "-v", f"{node}:/node", "-v", f"{other}:/mirror:ro",
                 nvfabric_image, "install", "--root", "/node", "--mirror", "/mirror",
                 "--retries", "0", "--json", check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    assert json.loads(out.stdout)["error"]["code"] == "artifact_not_available"
    out = podman("run", "--rm", *RUN_FLAGS, "-v", f"{node}:/node", nvfabric_image, "run",
                 "--root", "/node", "--json", check=False)
    assert out.returncode == 1
    assert "binary_missing" in {f["code"] for f in json.loads(out.stdout)["findings"]}
