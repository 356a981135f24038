"""Every place the fabric daemons write is writable in the deploy targets, whose container
root is read-only (the DaemonSet's ``readOnlyRootFilesystem: true``; Talos mounts an extension
service's root read-only). With ``run --root /`` nvfabric starts NVLSM and fabric manager at
their vendor paths, and they write where nvfabric's own code and the shipped fabric manager
config say:

- NVLSM: its pid file (``--nvlsm-pid-file``, default ``nvlsm.PID_FILE``), the IPC socket's
  directory, its database under ``nvlsm.DATABASE_DIR``;
- fabric manager: ``STATE_FILE_NAME`` and ``LOG_FILE_NAME`` of the shipped config
  (tests/data/corpus/configs/fabricmanager-535.216.01.cfg) unless ``--fm-set`` moves them;
- nvfabric: its state dir (``--state-dir``, default /run/nvfabric).

In the image (Debian) ``/var/run`` is a link to ``/run``; both are resolved so.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvfabric.bringup import nvlsm
from nvfabric.cli.run import run_cmd

REPO = Path(__file__).resolve().parents[2]
SHIPPED_FM_CFG = REPO / "tests/data/corpus/configs/fabricmanager-535.216.01.cfg"
#: the image's own links (Debian base-files: /var/run -> /run)
IMAGE_LINKS = {"/var/run": "/run"}


def _resolve(path: str, links: dict[str, str]) -> str:
    path = posixpath.normpath(path)
    for link, target in links.items():
        if path == link or path.startswith(link + "/"):
            return target + path[len(link):]
    return path


def _option(args: list[str], name: str) -> list[str]:
    out = []
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            out.append(args[i + 1])
        elif arg.startswith(name + "="):
            out.append(arg.split("=", 1)[1])
    return out


def _default(name: str) -> str:
    (param,) = [p for p in run_cmd.params if p.name == name]
    assert isinstance(param.default, str)
    return param.default


def daemon_writes(args: list[str]) -> dict[str, str]:
    """What writes where (a path each), for ``run`` with ``args``."""
    fm_cfg = dict(line.split("=", 1) for line in SHIPPED_FM_CFG.read_text().splitlines()
                  if "=" in line and not line.startswith("#"))
    for item in _option(args, "--fm-set"):
        key, value = item.split("=", 1)
        fm_cfg[key] = value
    pid = (_option(args, "--nvlsm-pid-file") or [nvlsm.PID_FILE])[-1]
    state = (_option(args, "--state-dir") or [_default("state_dir")])[-1]
    return {
        "NVLSM pid file": pid,
        "NVLSM IPC socket": nvlsm.SOCKET,
        "NVLSM database": nvlsm.DATABASE_DIR + "/",
        "fabric manager STATE_FILE_NAME": fm_cfg["STATE_FILE_NAME"],
        "fabric manager LOG_FILE_NAME": fm_cfg["LOG_FILE_NAME"],
        "nvfabric state dir": state + "/",
    }


def unwritable(args: list[str], writable: list[str], links: dict[str, str]) -> list[str]:
    """The writes of ``run args`` that fall on none of the ``writable`` mount points."""
    mounts = [_resolve(m, links) for m in writable]
    bad = []
    for what, path in daemon_writes(args).items():
        real = _resolve(path, links)
        if not any(real == m or real.startswith(m.rstrip("/") + "/") for m in mounts):
            bad.append(f"{what} {path} ({real}) is on the read-only root")
    return bad


def test_the_check_catches_a_write_outside_the_mounts() -> None:
    args = ["run", "--root", "/"]
    found = unwritable(args, ["/run/nvfabric", "/var/log", "/tmp", "/var/cache"], IMAGE_LINKS)
    assert found == [f"NVLSM pid file {nvlsm.PID_FILE} (/run/nvlsm.pid) is on the read-only "
                     "root", f"NVLSM IPC socket {nvlsm.SOCKET} "
                     "(/run/nvidia-fabricmanager/fm_sm_ipc.socket) is on the read-only root"]


def _daemonset() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(
        (REPO / "deploy/kubernetes/base/daemonset.yaml").read_text())
    return doc


def test_daemonset_gives_every_daemon_write_a_writable_mount() -> None:
    pod = _daemonset()["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
    writable = [m["mountPath"] for m in ctr["volumeMounts"] if not m.get("readOnly")]
    assert unwritable(ctr["args"], writable, IMAGE_LINKS) == []


@pytest.mark.parametrize("overlay", ["nvswitch", "nvlink5"])
def test_overlays_that_start_daemons_keep_the_base_args(overlay: str) -> None:
    # the writes above are checked on the base's args: an overlay that started daemons with
    # other args would need its own check
    text = (REPO / "deploy/kubernetes/overlays" / overlay / "kustomization.yaml").read_text()
    assert "/args" not in text and "args:" not in (
        REPO / "deploy/kubernetes/overlays" / overlay / "daemonset.yaml").read_text()


def _talos(arch: str) -> tuple[list[str], list[str]]:
    spec = yaml.safe_load((REPO / f"deploy/talos/nvfabric-{arch}.yaml").read_text())
    writable = [m["destination"] for m in spec["container"]["mounts"]
                if "ro" not in m.get("options", [])]
    return spec["container"]["args"], writable


def test_talos_service_gives_every_daemon_write_a_writable_mount() -> None:
    args, writable = _talos("x86_64")
    # the Talos container root (packaging/talos/build_extension.py) has real directories
    assert unwritable(args, writable, {}) == []


def test_talos_tray_service_writes_its_state_and_imex_log_on_mounts() -> None:
    from nvfabric.rules.imex.config import SHIPPED_DEFAULTS

    args, writable = _talos("aarch64")
    state = (_option(args, "--state-dir") or [_default("state_dir")])[-1]
    log = dict(SHIPPED_DEFAULTS)["LOG_FILE_NAME"]
    for path in (state + "/", log):
        assert any(path.startswith(m.rstrip("/") + "/") for m in writable), path
