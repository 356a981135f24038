"""Fake ``nv-fabricmanager``: the version check against the driver, the config checks,
the NVLSM socket on NVLink 5 nodes, and the registration of the simulated GPUs in
``gpus.json``. Standard library only (copied into simulated trees).
"""

from __future__ import annotations

import os
import sys

from .daemon import Daemon, daemonize, init_stamp, options, read_cfg, say, short_path, stamp
from .state import NVLSM_SOCKET, driver_version, faults, host, load, node_root, record, save

TYPE_CHECKING = False
if TYPE_CHECKING:
    from socket import socket
    from typing import Any

FM_RUNTIME_DIR = "/var/run/nvidia-fabricmanager"


SUCCESS_LINE = (
    "Successfully configured all the available NVSwitches to route GPU NVLink traffic. NVLink "
    "Peer-to-Peer support will be enabled once the GPUs are successfully registered with the "
    "NVLink fabric."
)


NOTHING_TO_DO = (
    "request to query NVSwitch device information from NVSwitch driver failed with "
    "error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]"
)


def fabricmanager(argv: list[str]) -> int:
    """Fake ``nv-fabricmanager``: ``--version``, ``-c CONFIG``, ``-g GUID``. Checks its version
    against the driver's, needs ``-g`` and NVLSM's socket on an NVLink 5 node (otherwise the
    real NV_WARN_NOTHING_TO_DO line), then registers the simulated GPUs."""
    root = node_root()
    node = load(root, "node.json", {})
    flt = faults(root, "fabricmanager")
    version = str(flt.get("version") or node.get("fm_version") or driver_version(root) or "")
    if argv[:1] in (["--version"], ["-v"]):
        say(f"Fabric Manager version is : {version}")
        return 0
    record(root, "fabricmanager", "exec", argv=argv)
    opts = options(argv, {"-c": "config", "--config": "config", "-g": "guid",
                           "--fm-sm-mgmt-port-guid": "guid"})
    if opts is None or "config" not in opts:
        say("[fake] usage: nv-fabricmanager -c <config file> [-g <port GUID>]")
        return 1
    try:
        cfg = read_cfg(opts["config"])
    except OSError as err:
        say(f"[fake] failed to open fabric manager config file {opts['config']}: {err.strerror}")
        return 1
    if cfg.get("DAEMONIZE", "1") == "1" and daemonize(float(flt.get("daemon_lifetime_s", 3))):
        return 0
    d = Daemon(root, "fabricmanager")
    log = _open_log(cfg.get("LOG_FILE_NAME", ""))
    tid = os.getpid()
    _log_start(log, tid, version, cfg)
    # R06: fabric manager makes its runtime directory private.
    runtime = host(root, FM_RUNTIME_DIR)
    if os.path.isdir(runtime):
        try:
            os.chmod(runtime, 0o700)
        except OSError:
            pass
    if not _driver_matches(root, version, log, tid) or not _paths_valid(cfg):
        return 1
    fabric = node.get("fabric", "nvswitch")
    guid = opts.get("guid")
    conn: socket | None = None
    if fabric not in ("nvswitch", "nvlink5") or (fabric == "nvlink5" and not guid):
        say(NOTHING_TO_DO)
        return 1
    if fabric == "nvlink5":
        conn = _connect_nvlsm(root, cfg, str(guid))
        if conn is None:
            return 1
    return _serve(d, flt, log, tid, conn)


def _serve(d: Daemon, flt: dict[str, Any], log: Any, tid: int,
           conn: socket | None) -> int:
    """Connected: register the simulated GPUs (in progress, then completed after
    ``register_delay_s`` unless ``stuck``) and serve until stopped; the exit status."""
    root = d.root
    say("Connected to 1 node.")
    say(f"{stamp(tid)} Connected to 1 node.", log)
    _set_gpus(root, "in_progress")
    if not d.wait(float(flt.get("start_delay_s", 0))):
        return d.crash() if d.crash_due() else 0
    say(SUCCESS_LINE)
    say(f"{stamp(tid)} {SUCCESS_LINE}", log)
    if d.wait(float(flt.get("register_delay_s", 0.05))) and not flt.get("stuck"):
        _set_gpus(root, "completed")
        record(root, "fabricmanager", "registered")
    while d.wait(3600):
        pass
    if d.crash_due():
        return d.crash()
    d.shutdown_delay()
    if conn is not None:
        conn.close()
    return 0


def _log_start(log: Any, tid: int, version: str, cfg: dict[str, str]) -> None:
    """The start-up lines of the fabric manager log: version and configuration options."""
    say(f"Fabric Manager Log initializing at: {init_stamp()}", log)
    say(f"{stamp(tid)} Fabric Manager version {version} is running with the following "
        "configuration options", log)
    for key, text in (("LOG_LEVEL", "Logging level"), ("LOG_FILE_NAME", "Logging file name/path"),
                      ("FABRIC_MODE", "Fabric Mode"), ("DAEMONIZE", "Daemonize")):
        say(f"{stamp(tid)} {text} = {cfg.get(key, '')}", log)


def _driver_matches(root: str, version: str, log: Any, tid: int) -> bool:
    """Fabric manager's version is the loaded driver's; else the real mismatch line (on the
    console and in the log) and False."""
    driver = driver_version(root)
    if driver != version:
        line = (f"fabric manager NVIDIA GPU driver interface version {version} don't match with "
                f"driver version {driver}. Please update with matching NVIDIA driver package.")
        say(line)
        say(f"{stamp(tid)} {line}", log)
        return False
    return True


def _paths_valid(cfg: dict[str, str]) -> bool:
    """The config's directories and node config file exist; else the real "has an invalid
    value" line and False."""
    node_cfg = cfg.get("FABRIC_NODE_CONFIG_FILE", "")
    for key in ("TOPOLOGY_FILE_PATH", "DATABASE_PATH"):
        if cfg.get(key) and not os.path.isdir(cfg[key]):
            say(f"fabric manager config file item: {key} has an invalid value")
            return False
    if node_cfg and not os.path.isfile(node_cfg):
        say("fabric manager config file item: FABRIC_NODE_CONFIG_FILE has an invalid value")
        return False
    return True


def _connect_nvlsm(root: str, cfg: dict[str, str], guid: str) -> socket | None:
    """Connect to NVLSM's FM-SM IPC socket and check that NVLSM serves the same port GUID
    (NVLink 5 nodes); None, after the failure line, when it cannot."""
    import socket

    sm = load(root, "nvlsm.json", {})
    path = cfg.get("FM_SM_IPC_INTERFACE") or host(root, NVLSM_SOCKET)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with short_path(path) as name:
            conn.connect(name)
    except OSError as err:
        say(f"[fake] failed to connect to NVLink Subnet Manager IPC socket {path}: "
            f"{err.strerror}")
        return None
    if str(guid).lower() != sm.get("guid"):
        say(f"[fake] management port GUID {guid} differs from NVLSM's {sm.get('guid')}")
        return None
    return conn


def _open_log(path: str) -> Any:
    """FM's log file; stderr when the path is empty or cannot be opened (the shipped cfg's
    comment on LOG_FILE_NAME)."""
    if path:
        try:
            return open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the fake
        except OSError:
            pass
    return sys.stderr


def _set_gpus(root: str, state: str) -> None:
    data = load(root, "gpus.json", {"gpus": []})
    for gpu in data.get("gpus", []):
        if gpu.get("state") == "not_supported":
            continue
        gpu["state"] = state
        done = state == "completed"
        gpu["status"] = "Success" if done else "N/A"
        gpu["health"] = "Healthy" if done else "N/A"
        gpu["clique_id"] = gpu.get("clique_when_done", 0) if done else None
        gpu["cluster_uuid"] = (gpu.get("cluster_when_done", "00000000-0000-0000-0000-000000000000")
                               if done else None)
    save(root, "gpus.json", data)
