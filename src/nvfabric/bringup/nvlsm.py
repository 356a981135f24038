"""NVLSM, the NVLink Subnet Manager of NVLink 5 baseboards (an OpenSM derivative).

Vendor layout (NVIDIA Fabric Manager User Guide, "NVLink Subnet Manager"; the nvlsm package
of the CUDA redist, tests/data/corpus/redist/cuda-redistrib_13.0.2-*.json; the command seen in
tests/data/corpus/logs/talos-hgx-b200-wrapper-nvlsm-start-excerpt-ext893.txt):

- binary ``/opt/nvidia/nvlsm/sbin/nvlsm``, config ``/usr/share/nvidia/nvlsm/nvlsm.conf``;
- pid file ``/var/run/nvlsm.pid``;
- the IPC socket fabric manager connects to: ``/var/run/nvidia-fabricmanager/fm_sm_ipc.socket``
  (fabric manager's ``FM_SM_IPC_INTERFACE`` when set).

NVLSM runs in the foreground, logging to stdout (``-f stdout``), bound to the management port
whose GUID it gets with ``-g``; fabric manager gets the same GUID. The banner's first line names
its own OpenSM-style calendar version (``OpenSM 2025.06.5_eb3b4ba_df9bb3c_ae214d2``), which is
not the driver version (case F02).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nvfabric.bringup.spec import ServiceSpec, check_guid
from nvfabric.model.hostpath import check as check_path

BINARY = "/opt/nvidia/nvlsm/sbin/nvlsm"
CONFIG = "/usr/share/nvidia/nvlsm/nvlsm.conf"
PID_FILE = "/var/run/nvlsm.pid"
SOCKET = "/var/run/nvidia-fabricmanager/fm_sm_ipc.socket"
#: Where NVLSM writes its database files (an OpenSM derivative: OpenSM keeps its cache, such as
#: guid2lid, under /var/cache/opensm). Source: siderolabs/extensions
#: nvidia-gpu/nvidia-fabricmanager/*/nvidia-fabricmanager.yaml, which binds a writable
#: directory there ("nvlsm: database files"). A read-only container root needs a mount here.
DATABASE_DIR = "/var/cache"

#: Banner line with NVLSM's own version (talos capture above).
_BANNER = re.compile(r"\bOpenSM\s+(\S+)")


@dataclass(frozen=True)
class NvlsmPaths:
    """Where NVLSM lives, host view (resolved under ``--root`` by the caller)."""

    binary: str = BINARY
    config: str = CONFIG
    pid_file: str = PID_FILE
    socket: str = SOCKET


def argv(paths: NvlsmPaths, guid: str) -> tuple[str, ...]:
    """``nvlsm -F <conf> -g <GUID> --pid_file <path> -f stdout``; ValueError on a bad GUID or
    path."""
    return (
        check_path(paths.binary, "nvlsm binary"),
        "-F", check_path(paths.config, "nvlsm config"),
        "-g", check_guid(guid),
        "--pid_file", check_path(paths.pid_file, "nvlsm pid file"),
        "-f", "stdout",
    )


def spec(paths: NvlsmPaths, guid: str, grace_s: float = 10.0) -> ServiceSpec:
    """NVLSM as a service: ready once its IPC socket exists (the socket's directory is created
    beforehand, mode 0700)."""
    socket = check_path(paths.socket, "NVLSM IPC socket")
    return ServiceSpec(
        name="nvlsm",
        argv=argv(paths, guid),
        ready_socket=socket,
        grace_s=grace_s,
        runtime_dirs=(socket.rsplit("/", 1)[0] or "/",),
        pid_file=paths.pid_file,
    )


def parse_banner_version(text: str) -> str | None:
    """NVLSM's own version from its banner (``OpenSM 2025.06.5_...``), or None."""
    match = _BANNER.search(text)
    return match.group(1) if match else None
