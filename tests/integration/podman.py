"""Podman for the integration tests: a private storage, the bookworm base, the nvfabric image.

Every podman call here runs on a storage of its own (``--root``/``--runroot`` under
``build/podman/`` of the checkout, ignored by git), so the tests never see or touch other
containers or images of the machine. The settings this sandbox needs: the overlay driver on
the checkout's ext4, the ``cgroupfs`` cgroup manager (cgroup v1, no systemd session), the
``file`` events backend (no journald), ``--runtime runc``, and explicit ``--ulimit
nofile=1024:1024 --ulimit nproc=1024:1024`` on each run (the defaults podman derives from
this machine's limits are refused by runc here). No registry is reachable: the base image is
the cached mmdebstrap tarball of a bookworm root without Python (``debroot.bookworm_tarball(())``:
the image needs none) imported with ``podman import``, and every run and build says ``--pull
never``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.integration.debroot import REPO, bookworm_tarball, require

STORE = REPO / "build" / "podman"
#: tagged by what it holds: a storage kept from an earlier checkout may hold a base of the same
#: name with other packages (the base had python3 before), which must not be taken for this one
BASE_IMAGE = "localhost/nvfabric-test-base:bookworm-apt"
IMAGE = "localhost/nvfabric:test"
TALOS_IMAGE = "localhost/nvfabric-talos:test"
RUN_FLAGS = ["--runtime", "runc", "--pull=never", "--network", "none",
             "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]


def podman_argv(*args: str) -> list[str]:
    """``podman`` with the private storage and this sandbox's settings, then ``args``."""
    return ["podman", "--root", str(STORE / "root"), "--runroot", str(STORE / "run"),
            "--storage-driver", "overlay", "--cgroup-manager", "cgroupfs",
            "--events-backend", "file", "--tmpdir", str(STORE / "tmp"), *args]


def storage_ref(image: str) -> str:
    """The skopeo/containers-storage reference of ``image`` in the private storage."""
    return f"containers-storage:[overlay@{STORE / 'root'}+{STORE / 'run'}]{image}"


def podman(*args: str, timeout: float = 120,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run podman on the private storage; output captured as text."""
    (STORE / "tmp").mkdir(parents=True, exist_ok=True)  # also makes STORE
    return subprocess.run(podman_argv(*args), capture_output=True, text=True, timeout=timeout,
                          check=check)


def _has_image(name: str) -> bool:
    return podman("image", "exists", name, check=False).returncode == 0


def base_image() -> str:
    """The bookworm base (apt variant, no Python) in the private storage, imported once."""
    require("podman", "runc")
    if not _has_image(BASE_IMAGE):
        podman("import", str(bookworm_tarball(())), BASE_IMAGE, timeout=600)
    return BASE_IMAGE


BUILD_FLAGS = ["--runtime", "runc", "--pull=never", "--network", "none",
               "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]


def _make(target: str, **variables: str) -> None:
    """``make TARGET VAR=VALUE...`` in the checkout with podman on the private storage: the
    Makefile's own image targets, so the tests build what an operator builds. A lock
    serialises parallel builds; AssertionError with the end of make's output on failure."""
    argv = ["make", "-s", target, f"PODMAN={shlex.join(podman_argv())}",
            f"PODMAN_BUILD_FLAGS={shlex.join(BUILD_FLAGS)}",
            *(f"{k}={v}" for k, v in variables.items())]
    (STORE / "tmp").mkdir(parents=True, exist_ok=True)
    with open(STORE / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900,
                              check=False)
        # earlier builds' untagged images and build stages: the private storage stays small
        podman("image", "prune", "--force", check=False, timeout=300)
    if done.returncode:
        raise AssertionError(f"make {target} failed ({done.returncode}):\n"
                             + (done.stdout + done.stderr)[-3000:])


def build_image() -> str:
    """``make image`` (deploy/container/Containerfile: the one-dir build, no fabric) on the
    bookworm base, as ``IMAGE``."""
    require("podman", "buildah", "runc", "make")
    _make("image", BASE=base_image(), IMAGE=IMAGE)
    return IMAGE


def build_driver_image(driver: str, mirror: Path) -> str:
    """``make image DRIVER_VERSION=driver MIRROR=mirror``: the image with that driver's
    fabric inside, as ``IMAGE-<driver>`` (the tag scheme's ``<version>-<driver>``)."""
    require("podman", "buildah", "runc", "make")
    image = f"{IMAGE}-{driver}"
    _make("image", BASE=base_image(), IMAGE=image, DRIVER_VERSION=driver, MIRROR=str(mirror))
    return image


def inspect(kind: str, name: str) -> dict[str, Any]:
    """``podman <kind> inspect NAME`` as one object."""
    out = podman(kind, "inspect", name).stdout
    data = json.loads(out)
    assert isinstance(data, list) and len(data) == 1, out
    obj = data[0]
    assert isinstance(obj, dict)
    return obj


def simulate_in_image(image: str, node: Path, profile: str = "dgx-b200",
                      *extra: str) -> Path:
    """``nvfabric simulate PROFILE`` run by the image into ``node`` (bind-mounted at /node).

    Simulated inside the image, the fake daemons' shebang names the image's own nvfabric
    (``#!/usr/lib/nvfabric/nvfabric --nvfabric-sim-fake``): the host venv's path would not
    exist in the container, as a real fabric manager runs on the image's loader and libraries,
    not the host's. ``extra``: more simulate options (``--driver-only``)."""
    node.mkdir(parents=True, exist_ok=True)
    podman("run", "--rm", *RUN_FLAGS, "-v", f"{node}:/node", image, "simulate", profile, "/node",
           *extra)
    return node


def export_root(image: str, dest: Path) -> Path:
    """The image's root filesystem unpacked into ``dest`` (``podman export`` of a container
    made from it, never started)."""
    name = f"nvfabric-export-{os.getpid()}-{dest.name}"
    podman("create", "--name", name, image)
    try:
        dest.mkdir(parents=True, exist_ok=True)
        tar = podman_argv("export", name)
        with subprocess.Popen(tar, stdout=subprocess.PIPE) as src:
            subprocess.run(["tar", "-x", "-C", str(dest)], stdin=src.stdout, check=True,
                           timeout=600)
        assert src.returncode == 0
    finally:
        podman("rm", "--force", name, check=False)
    return dest


def wait_for(path: Path, timeout: float, container: str | None = None) -> None:
    """Poll until ``path`` exists (AssertionError after ``timeout`` seconds, or at once with
    the container's last log lines when ``container`` has exited)."""
    deadline = time.monotonic() + timeout
    checked = time.monotonic()
    while not path.exists():
        now = time.monotonic()
        if now > deadline:
            raise AssertionError(f"{path} did not appear within {timeout} s")
        if container is not None and now - checked > 1:
            checked = now
            if not inspect("container", container)["State"]["Running"]:
                logs = podman("logs", container, check=False)
                raise AssertionError(f"{container} exited before {path} appeared:\n"
                                     + (logs.stdout + logs.stderr)[-3000:])
        time.sleep(0.1)


def host_pid(container: str) -> int:
    """The host pid of the container's PID 1."""
    pid = inspect("container", container)["State"]["Pid"]
    assert isinstance(pid, int) and pid > 0, pid
    return pid


def children(pid: int) -> list[int]:
    """Host pids of the direct children of ``pid`` (/proc/PID/task/*/children)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(p) for p in (task / "children").read_text().split()]
    return out


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def build_talos_image(arch: str, driver: str, mirror: Path, **variables: str) -> str:
    """``make talos-image DRIVER_VERSION=driver ARCH=arch MIRROR=mirror`` (deploy/talos,
    FROM scratch) as ``TALOS_IMAGE-<arch>``, its extension assembled under build/talos-<arch>/
    of the checkout; ``variables`` are further make variables (TALOS_DIST, TALOS_GLIBC_ROOT
    for an architecture this machine cannot build)."""
    require("podman", "buildah", "make")
    image = f"{TALOS_IMAGE}-{arch}"
    _make("talos-image", DRIVER_VERSION=driver, ARCH=arch, MIRROR=str(mirror),
          TALOS_IMAGE=image, TALOS_EXT=f"build/talos-{arch}/ext",
          TALOS_ARTIFACTS=f"build/talos-{arch}/artifacts", **variables)
    return image
