"""The container image of deploy/container/Containerfile, built and run with the real podman.

The image is built on a bookworm root made by mmdebstrap (no registry is reachable), runs
``nvfabric run`` as PID 1 on a simulated DGX B200 bind-mounted as its ``--root``, reaches
ready, stops fabric manager then NVLSM on ``podman stop``, leaves no daemon behind when it is
killed, and its OCI layout is checked by skopeo and umoci.
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

from tests.integration.debroot import REPO, require
from tests.integration.podman import (
    RUN_FLAGS,
    alive,
    children,
    host_pid,
    inspect,
    podman,
    simulate_in_image,
    storage_ref,
    wait_for,
)

GRACE_S = 5.0


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
    # exec form: the kernel runs the console script (its shebang is the venv's python); no
    # /bin/sh -c anywhere between the runtime and nvfabric.
    assert config["Entrypoint"] == ["/opt/nvfabric/bin/nvfabric"]
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
    # no pip, no build tools in the image: pip ran from its wheel in the build stage only
    listing = podman("run", "--rm", *RUN_FLAGS, "--entrypoint", "/opt/nvfabric/bin/python",
                     nvfabric_image, "-c",
                     "import importlib.util as u; print(u.find_spec('pip') is None)").stdout
    assert listing.strip() == "True"


def test_run_on_simulated_b200_ready_as_pid1_then_podman_stop_in_order(
        nvfabric_image: str, container_name: str, tmp_path: Path) -> None:
    node = simulate_in_image(nvfabric_image, tmp_path / "node")
    shebang = (node / "bin" / "nvlsm").read_text().splitlines()[0]
    assert shebang == "#!/opt/nvfabric/bin/python -IS"
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
    # supervising process"), still shown as the image's nvfabric command running `run`
    assert cmdline[0] == b"/opt/nvfabric/bin/nvfabric" and b"run" in cmdline, cmdline
    assert b"--supervise-fd" in cmdline and b"nvfabric.supervisor.lean" in b" ".join(cmdline)
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
    assert config["config"]["Entrypoint"] == ["/opt/nvfabric/bin/nvfabric"]
    # the image is the base plus one layer of nvfabric's venv
    assert len(manifest["layers"]) == 2
    size = inspect("image", nvfabric_image)["Size"]
    print(f"\nimage size: {size / 1e6:.0f} MB uncompressed; layers {[s // 1000 for s in sizes]} kB")
