"""Fake ``nvidia-imex``: reads its config and node list, fails with the real "No matching
network interface" error when no entry is this node, else publishes the domain's status in
``imex.json`` for :mod:`.imexctl`. Standard library only (copied into simulated trees).
"""

from __future__ import annotations

import os
import sys
import time

from .daemon import Daemon, daemonize, init_stamp, options, read_cfg, say, short_path, stamp
from .state import driver_version, faults, load, node_root, record, save

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def nvidia_imex(argv: list[str]) -> int:
    """Fake ``nvidia-imex -c <config.cfg>``: reads IMEX_NODE_CONFIG_FILE, fails with the real
    "No matching network interface" error when no entry is a local address, otherwise serves
    until SIGTERM and publishes its status for ``nvidia-imex-ctl`` in ``imex.json``."""
    root = node_root()
    record(root, "imex", "exec", argv=argv)
    opts = options(argv, {"-c": "config", "--config": "config"})
    if opts is None:
        say("[fake] usage: nvidia-imex -c <config file>")
        return 1
    path = opts.get("config", "/etc/nvidia-imex/config.cfg")
    try:
        cfg = read_cfg(path)
    except OSError as err:
        say(f"[fake] failed to open IMEX config file {path}: {err.strerror}")
        return 1
    node = load(root, "node.json", {})
    flt = faults(root, "imex")
    if cfg.get("DAEMONIZE", "1") == "1" and daemonize(float(flt.get("daemon_lifetime_s", 3))):
        return 0
    d = Daemon(root, "imex")
    log = _open_log(cfg.get("LOG_FILE_NAME", ""))
    tid = os.getpid()
    version = str(node.get("imex_version") or driver_version(root) or "")
    say(f"IMEX Log initializing at: {init_stamp()}", log)
    say(f"{stamp(tid)} IMEX version {version} is running with the following configuration "
        "options", log)
    say(f"{stamp(tid)} Logging level = {cfg.get('LOG_LEVEL', '4')}", log)
    say(f"{stamp(tid)} IMEX library communication bind port = {cfg.get('SERVER_PORT', '50000')}",
        log)
    nodes_file = cfg.get("IMEX_NODE_CONFIG_FILE", "/etc/nvidia-imex/nodes_config.cfg")
    try:
        with open(nodes_file, encoding="utf-8") as fh:
            entries = [ln.strip() for ln in fh if ln.strip() and not ln.startswith("#")]
    except OSError as err:
        say(f"[fake] failed to open IMEX node config file {nodes_file}: {err.strerror}", log)
        return 1
    local = set(flt.get("local_ips") or _fib_trie(root) or node.get("local_ips")
                or ["127.0.0.1"])
    hostname = _hostname(root) or str(node.get("hostname", "node-01"))
    me = _own_entry(entries, local, hostname, log, tid)
    if me is None:
        say(time.strftime("[%b %d %Y %H:%M:%S]") + f" [ERROR] [tid {tid}] No matching network "
            "interface found for any IP addresses in the node configuration file", log)
        return 1
    peers_up = flt.get("peers", "up") == "up"
    nodes = {str(i): {"status": "READY" if (i == me or peers_up) else "UNAVAILABLE",
                      "host": entry, "version": version} for i, entry in enumerate(entries)}
    status = "UP" if all(n["status"] == "READY" for n in nodes.values()) else "DEGRADED"
    sock_path = _serve_commands(cfg, log, tid)
    save(root, "imex.json", {"pid": os.getpid(), "self": str(me), "status": status,
                             "nodes": nodes, "since": time.time(), "socket": sock_path})
    while d.wait(3600):
        pass
    save(root, "imex.json", {"pid": None, "status": "DOWN", "nodes": {}})
    _remove(sock_path)
    if d.crash_due():
        return d.crash()
    d.shutdown_delay()
    return 0


def _serve_commands(cfg: dict[str, str], log: Any, tid: int) -> str:
    """The command service on the Unix socket IMEX_CMD_UNIX_DOMAIN_PATH (with
    IMEX_CMD_ENABLED=1), its path ("" when none): bound (a stale file replaced), every
    connection accepted and closed by a daemon thread, so that ``nvidia-imex-ctl --u=PATH``
    reaches it as long as the daemon runs."""
    import socket
    import threading

    path = cfg.get("IMEX_CMD_UNIX_DOMAIN_PATH", "") if cfg.get("IMEX_CMD_ENABLED", "1") == "1" \
        else ""
    if not path:
        return ""

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with short_path(path) as name:
        listener.bind(name)
    listener.listen(16)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    say(f"{stamp(tid)} IMEX command service listening on {path}", log)
    return path


def _remove(path: str) -> None:
    """The command socket's file, removed as the daemon stops ("" : none)."""
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass


def _open_log(log_name: str) -> Any:
    """IMEX's log file; stderr (after the real warning lines) when it cannot be opened, or
    when LOG_FILE_NAME is empty."""
    log: Any = sys.stderr
    if log_name:
        try:
            log = open(log_name, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the fake
        except OSError:
            say("WARNING: failed to open IMEX log file  errno = No such file or directory")
            say("INFO: using stderr for IMEX logging")
    return log


def _own_entry(entries: list[str], local: set[str], hostname: str, log: Any,
               tid: int) -> int | None:
    """The index of this node in the node list: its host name, else the first entry that is
    one of its local addresses; None when neither is there."""
    import ipaddress

    me = None
    for i, entry in enumerate(entries):
        try:
            ipaddress.ip_address(entry)
        except ValueError:
            say(f"{stamp(tid)} Treating node config entry '{entry}' as a host name.", log)
            if entry == hostname:
                me = i
            continue
        if entry in local and me is None:
            me = i
    return me


def _hostname(root: str) -> str:
    """The node's host name from its ``etc/hostname`` (first line), "" when absent: the same
    file nvfabric reads (nvfabric.facts.imex.tray.local_names), so a tree whose host name was set
    is one host for both."""
    try:
        with open(os.path.join(root, "etc/hostname"), encoding="utf-8") as fh:
            return fh.readline().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _fib_trie(root: str) -> list[str]:
    """The node's IPv4 addresses from its ``proc/net/fib_trie`` (``|-- A.B.C.D`` then
    ``/32 host LOCAL``), [] when the file is absent."""
    out: list[str] = []
    leaf = None
    try:
        with open(os.path.join(root, "proc/net/fib_trie"), encoding="utf-8") as fh:
            for line in fh:
                text = line.strip()
                if text.startswith("|-- "):
                    leaf = text[4:]
                elif leaf and text.startswith("/32 host LOCAL") and leaf not in out:
                    out.append(leaf)
    except OSError:
        pass
    return out
