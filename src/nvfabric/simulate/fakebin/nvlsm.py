"""Fake NVLSM (``/opt/nvidia/nvlsm/sbin/nvlsm``): the OpenSM banner, the ib_umad and port
GUID checks, the pid file and the FM-SM IPC socket fabric manager connects to on NVLink 5
nodes. Standard library only (copied into simulated trees).
"""

from __future__ import annotations

import os
import time

from .daemon import Daemon, options, say
from .state import NVLSM_SOCKET, host, load, node_root, port_guids, record, save

TYPE_CHECKING = False
if TYPE_CHECKING:
    from socket import socket
    from typing import Any

NVLSM_VERSION = "2025.06.5_eb3b4ba_df9bb3c_ae214d2"


def nvlsm(argv: list[str]) -> int:
    """Fake NVLSM (OpenSM derivative): ``-F/--config``, ``-g/--guid``, ``--pid_file``,
    ``-f/--log_file``. Prints the OpenSM banner, checks ib_umad and the GUID, writes its pid
    file, creates the FM-SM IPC socket after ``socket_delay_s`` and listens on it
    ``listen_delay_s`` later (faults; 0.05 s and 0 by default)."""
    root = node_root()
    record(root, "nvlsm", "exec", argv=argv)
    opts = options(argv, {"-F": "config", "--config": "config", "-g": "guid", "--guid": "guid",
                           "--pid_file": "pid_file", "-f": "log_file", "--log_file": "log_file"})
    if opts is None:
        say("Usage: nvlsm [-F config] [-g GUID] [--pid_file path] [-f log_file]  [fake]")
        return 1
    d = Daemon(root, "nvlsm")
    guid = _start_up(root, opts)
    if guid is None:
        return 1
    if "pid_file" in opts:
        try:
            with open(opts["pid_file"], "w", encoding="utf-8") as fh:
                fh.write(f"{os.getpid()}\n")
        except OSError:
            pass
    save(root, "nvlsm.json", {"pid": os.getpid(), "guid": guid.lower()})
    say("Entering DISCOVERING state")
    path = d.faults.get("socket_path") or host(root, NVLSM_SOCKET)
    listener: socket | None = None
    clients: list[socket] = []
    if not d.wait(float(d.faults.get("socket_delay_s", 0.05))):
        return d.crash() if d.crash_due() else _nvlsm_exit(d, opts, None, path)
    if not d.faults.get("no_socket"):
        listener = _listen(d, root, path)
        if listener is None:  # stopped (or crashed) between bind and listen
            return d.crash() if d.crash_due() else _nvlsm_exit(d, opts, None, path)
    say("Entering MASTER state")
    say("SUBNET UP")
    _spawn_orphans(root, int(d.faults.get("spawn_orphans", 0)))

    def serve(f: Any) -> None:
        if f is listener and listener is not None:
            clients.append(listener.accept()[0])
        else:
            try:
                if not f.recv(4096):
                    clients.remove(f)
                    f.close()
            except OSError:
                pass

    while d.wait(3600, [listener, *clients] if listener else None, serve):
        pass
    if d.crash_due():
        return d.crash()
    return _nvlsm_exit(d, opts, listener, path)


def _start_up(root: str, opts: dict[str, str]) -> str | None:
    """The OpenSM banner and start-up checks (config file, ib_umad, the port GUID is one of
    this node's ports); the GUID to bind, or None when NVLSM exits 1."""
    node = load(root, "node.json", {})
    say("-------------------------------------------------")
    say(f"OpenSM {node.get('nvlsm_version', NVLSM_VERSION)}")
    conf = opts.get("config", "/usr/share/nvidia/nvlsm/nvlsm.conf")
    say(f"Config file is `{conf}`:")
    if not os.path.isfile(conf):
        say(f"[fake] cannot open config file {conf}")
        return None
    say(f" Reading Cached Option File: {conf}")
    say("Command Line Arguments:")
    guid = opts.get("guid")
    if guid:
        say(f" Guid <{guid}>")
    if "pid_file" in opts:
        say(f" PID file <{opts['pid_file']}>")
    say(f" Log File: {opts.get('log_file', '/var/log/opensm.log')}")
    if not os.path.isfile(os.path.join(root, "sys/class/infiniband_mad/abi_version")):
        say(f"ibwarn: [{os.getpid()}] umad_init: can't read ABI version from "
            "/sys/class/infiniband_mad/abi_version (No such file or directory): is ib_umad "
            "module loaded?")
        return None
    if not guid or guid.lower() not in port_guids(root):
        say(f"[fake] port GUID {guid} is not a port of this node; cannot bind")
        return None
    return guid


def _listen(d: Daemon, root: str, path: str) -> socket | None:
    """The FM-SM IPC socket at ``path``, bound, then listening; None when a stop or the crash
    came in between. Fault ``listen_delay_s``: a busy NVLSM, slow between bind (the file
    appears) and listen (connections are accepted): fabric manager started in the gap is
    refused. Without it, listen follows bind at once, as in NVLSM, and the records come after
    both (a write of calls.jsonl between the two would be a gap of its own)."""
    listener = _bind(path)
    gap = float(d.faults.get("listen_delay_s", 0))
    if gap > 0:
        record(root, "nvlsm", "socket", path=path)
        if not d.wait(gap):
            listener.close()
            return None
    listener.listen(8)
    if gap <= 0:
        record(root, "nvlsm", "socket", path=path)
    record(root, "nvlsm", "listen", path=path)
    return listener


def _bind(path: str) -> socket:
    """Create the FM-SM IPC socket at ``path`` (replacing a stale one), bound, not yet
    listening. A path too long for sockaddr_un is bound through this process's descriptor of
    its directory, ``/proc/PID/fd/N/NAME`` (kept open while the socket lives), so that the
    name in the kernel's table of Unix sockets leads another process to the same file."""
    import socket

    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = path
    if len(os.fsencode(path)) >= 100:
        held = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)  # never closed
        # the pid as the mounted procfs knows it (in a pid namespace of its own, with the
        # host's /proc, getpid() is another number)
        name = f"/proc/{os.readlink('/proc/self')}/fd/{held}/{os.path.basename(path)}"
    listener.bind(name)
    return listener


def _spawn_orphans(root: str, count: int) -> None:
    """Fault ``spawn_orphans``: leave ``count`` short-lived grandchildren whose parent exits at
    once, so they are re-parented to PID 1 (or the nearest subreaper) and must be reaped there.
    Each records the parent it ended up with."""
    for _ in range(count):
        middle = os.fork()
        if middle == 0:
            parent = os.getpid()
            if os.fork() == 0:
                deadline = time.monotonic() + 2
                while os.getppid() == parent and time.monotonic() < deadline:
                    time.sleep(0.002)
                record(root, "nvlsm", "orphan", ppid=os.getppid())
                os._exit(0)
            os._exit(0)
        os.waitpid(middle, 0)


def _nvlsm_exit(d: Daemon, opts: dict[str, str], listener: socket | None,
                path: str) -> int:
    say("Exiting SM")
    d.shutdown_delay()
    if listener is not None:
        listener.close()
        try:
            os.unlink(path)
        except OSError:
            pass
    if "pid_file" in opts:
        try:
            os.unlink(opts["pid_file"])
        except OSError:
            pass
    return 0
