"""Liveness of the fabric services, read from a node (the host side of the verdict's input).

Evidence, all resolved under the root: a pid file whose pid has a ``proc/<pid>`` entry; else a
scan of ``proc/*/comm``; fabric manager's command port (``FM_CMD_PORT_NUMBER``, default 6666,
listening in ``proc/net/tcp``/``tcp6``) or command socket (``FM_CMD_UNIX_SOCKET_PATH``); NVLSM's
IPC socket (``FM_SM_IPC_INTERFACE`` when it names a path, default
``/var/run/nvidia-fabricmanager/fm_sm_ipc.socket``). A socket counts only while a process is
bound to it (``proc/net/unix`` lists it) or the daemon's process is found: a socket file left
by a killed daemon is reported as stale, and the service as not running. The age of a process is
``proc/uptime`` minus its start time (``proc/<pid>/stat`` field 22, in clock ticks).

The door between the node itself and a simulated tree is the root's own process table
(numeric ``proc/<pid>`` entries; the node itself always has one). A tree has none: its daemons
(the fakes) are processes of this host, so a pid read from a pid file under such a root is
checked with ``kill(pid, 0)`` and its age taken from the pid file's modification time, the
scan looks at this host's processes whose command line runs a file under the root, and a
socket counts as bound when this host's ``/proc/net/unix`` lists its path under the root.
A path (a pid file, a socket named by the config) that would leave the root
(:func:`nvfabric.model.hostpath.under`: ``..``, NUL) is as absent.

Facts (``SERVICES``): process names as the kernel truncates them to 15 characters in ``comm``
(``nv-fabricmanage``: tests/data/corpus/logs/fm-590.48.01-systemctl-status-pre-nvl5-node-01.txt
"Main PID: 5183 (nv-fabricmanage)"); pid files: NVLSM ``/var/run/nvlsm.pid``
(tests/data/corpus/logs/talos-hgx-b200-wrapper-nvlsm-start-excerpt-ext893.txt), fabric manager
``/var/run/nvidia-fabricmanager/nv-fabricmanager.pid`` (the start script's --fm-pid-file default),
and nvfabric's own ``/run/nvfabric/<service>.pid``; FM command port and config keys from the
stock fabricmanager.cfg (tests/data/corpus/configs/fabricmanager-535.216.01.cfg).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass

from nvfabric.facts import fs
from nvfabric.facts.fs import listdir, read_text
from nvfabric.model import hostpath
from nvfabric.model.errors import usage_error
from nvfabric.model.fmkeys import PATH_KEYS as FM_PATH_KEYS
from nvfabric.model.hostpath import PathEscape, under
from nvfabric.model.keyvalue import parse as parse_cfg
from nvfabric.model.services import ServiceState
from nvfabric.model.strict import control_free, int_or_none, is_uint, to_float, to_int
from nvfabric.model.vocab import Service


@dataclass(frozen=True)
class ServiceFacts:
    """Where to look for one service: ``comm`` names, pid files, the socket it serves."""

    comm: tuple[str, ...]
    pidfiles: tuple[str, ...]
    socket: str | None = None


SERVICES: dict[str, ServiceFacts] = {
    "fabricmanager": ServiceFacts(
        comm=("nv-fabricmanage", "nv-fabricmanager"),
        pidfiles=("/run/nvfabric/fabricmanager.pid",
                  "/var/run/nvidia-fabricmanager/nv-fabricmanager.pid"),
    ),
    "nvlsm": ServiceFacts(
        comm=("nvlsm", "opensm"),
        pidfiles=("/run/nvfabric/nvlsm.pid", "/var/run/nvlsm.pid"),
        socket="/var/run/nvidia-fabricmanager/fm_sm_ipc.socket",
    ),
    "imex": ServiceFacts(
        comm=("nvidia-imex",),
        pidfiles=("/run/nvfabric/imex.pid", "/var/run/nvidia-imex/nvidia-imex.pid"),
    ),
}

#: Where fabric manager's config is looked for (first existing wins): nvfabric's effective
#: config, the stock location, Bottlerocket's (tests/data/corpus/configs/).
FM_CONFIGS = (
    "/run/nvfabric/fabricmanager.cfg",
    "/usr/share/nvidia/nvswitch/fabricmanager.cfg",
    "/etc/nvidia/fabricmanager.cfg",
)
FM_CMD_PORT_DEFAULT = 6666
#: The largest pid Linux hands out (PID_MAX_LIMIT, 2^22, include/linux/threads.h).
PID_MAX = 1 << 22
TCP_LISTEN = "0A"


def fm_config(root: str) -> dict[str, str]:
    """Effective key/values of the first fabric manager config found, {} when none.

    Raises NvfabricError ``input_unreadable`` (exit 2) naming the file and key when a path key
    (``FM_SM_IPC_INTERFACE``, ``FM_CMD_UNIX_SOCKET_PATH``, ...) holds what no path may: a NUL,
    a newline or another control character (:func:`nvfabric.model.hostpath.problem`)."""
    for path in FM_CONFIGS:
        text = read_text(under(root, path), limit=1 << 20)
        if text is not None:
            items = parse_cfg(text).items()
            for key in FM_PATH_KEYS:
                value = items.get(key, "")
                if value and not control_free(value):
                    raise usage_error(
                        f"{under(root, path)}: {key} {value[:80]!r} may not contain a NUL, "
                        "newline or other control character",
                        "fix the fabric manager config: a path key holds one absolute path")
            return items
    return {}


def fabric_mode(root: str) -> int | None:
    """FABRIC_MODE of fabric manager's config (0 bare metal, 1 shared NVSwitch, 2 vGPU)."""
    return int_or_none(fm_config(root).get("FABRIC_MODE"), high=2)


def _has_process_table(proc: str) -> bool:
    """Numeric entries in ``proc`` (a root's proc directory, already joined)."""
    return any(is_uint(name) for name in listdir(proc))


def _age_from_stat(proc: str, pid: int) -> float | None:
    """Seconds ``pid`` has run, from ``proc`` (a proc directory, already joined)."""
    stat_text = read_text(f"{proc}/{pid}/stat")
    uptime = read_text(f"{proc}/uptime")
    if not stat_text or not uptime:
        return None
    try:
        fields = stat_text.rsplit(")", 1)[1].split()
        start_ticks = to_int(fields[19])  # field 22 overall; fields[0] is field 3 (state)
        up = to_float(uptime.split()[0])
        return max(0.0, up - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (IndexError, ValueError, OSError):
        return None


def zombie(root: str, pid: int) -> bool:
    """``pid`` has exited and waits to be reaped (state ``Z`` in ``proc/<pid>/stat``: the
    root's process table, else this host's for a simulated root whose daemons are host
    processes). ``kill(pid, 0)`` succeeds on a zombie, so it alone would call it running."""
    text = read_text(under(root, f"/proc/{pid}/stat"))
    if text is None:  # a tree without this pid: its daemons are this host's processes
        text = read_text(f"/proc/{pid}/stat")
    try:
        return text is not None and text.rsplit(")", 1)[1].split()[0] == "Z"
    except IndexError:
        return False


def _pid_alive_on_host(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except (ProcessLookupError, OverflowError, ValueError):
        return False
    return True


def _from_pidfile(root: str, path: str, table: bool) -> tuple[int, float | None] | None:
    try:
        full = under(root, path)
    except PathEscape:
        return None
    text = read_text(full)
    pid = int_or_none(text.split()[0], max_digits=10) if text else None
    if pid is None or not 0 < pid <= PID_MAX:
        return None
    if table:
        if not os.path.isdir(under(root, f"/proc/{pid}")) or zombie(root, pid):
            return None
        return pid, _age_from_stat(under(root, "/proc"), pid)
    if not _pid_alive_on_host(pid) or zombie(root, pid):
        return None
    try:
        age = max(0.0, time.time() - os.stat(full).st_mtime)
    except OSError:
        age = None
    return pid, age


def _scan(proc: str, names: tuple[str, ...]) -> tuple[int, float | None] | None:
    """The first process in ``proc`` (a root's proc directory) whose ``comm`` is one of
    ``names``: (pid, age)."""
    for entry in listdir(proc):
        if not is_uint(entry):
            continue
        comm = read_text(os.path.join(proc, entry, "comm"))
        if comm in names:
            pid = to_int(entry)
            return pid, _age_from_stat(proc, pid)
    return None


def _scan_host_for_root(root: str, names: tuple[str, ...]) -> tuple[int, float | None] | None:
    """A simulated root's daemon among this host's processes: ``comm`` matches and an argument
    of its command line is a path under the root (the fakes run ``<root>/usr/bin/...``)."""
    found = host_pids_for_root(root, names, limit=1)
    return (found[0], _age_from_stat("/proc", found[0])) if found else None


def host_pids_for_root(root: str, names: tuple[str, ...], limit: int = 16) -> tuple[int, ...]:
    """This host's processes (at most ``limit``) whose ``comm`` is one of ``names`` and whose
    command line names a path under ``root``: a simulated root's daemons."""
    prefix = os.path.realpath(root).rstrip("/") + "/"
    out: list[int] = []
    for entry in listdir("/proc"):
        if not is_uint(entry):
            continue
        if read_text(os.path.join("/proc", entry, "comm")) not in names:
            continue
        raw = read_text(os.path.join("/proc", entry, "cmdline"), limit=1 << 16) or ""
        if any(arg.startswith(prefix) for arg in raw.split("\0")) and not zombie(root,
                                                                                to_int(entry)):
            out.append(to_int(entry))
            if len(out) >= limit:
                break
    return tuple(sorted(out))


def pids(root: str, names: tuple[str, ...]) -> tuple[int, ...]:
    """Every live process named ``names`` (``comm``) of the node under ``root``: its process
    table, or for a tree without one this host's processes running a binary under it."""
    if _has_process_table(under(root, "/proc")):
        proc = under(root, "/proc")
        return tuple(sorted(to_int(e) for e in listdir(proc)
                            if is_uint(e) and read_text(os.path.join(proc, e, "comm")) in names
                            and not zombie(root, to_int(e))))
    return host_pids_for_root(root, names)


def pid_from_file(root: str, path: str) -> int | None:
    """The live pid a pid file under ``root`` names (the root's process table, else this
    host's for a tree), None when missing, malformed or gone."""
    found = _from_pidfile(root, path, _has_process_table(under(root, "/proc")))
    return found[0] if found else None


def _listening_tcp(root: str, port: int) -> bool:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        text = read_text(under(root, table), limit=1 << 22) or ""
        for line in text.splitlines()[1:]:
            cols = line.split()
            if len(cols) > 3 and cols[3] == TCP_LISTEN:
                try:
                    if int_or_none(cols[1].rsplit(":", 1)[1], base=16) == port:
                        return True
                except IndexError:
                    continue
    return False


def _unix_listing(path: str) -> set[str]:
    """Paths of the bound Unix sockets listed in a ``/proc/net/unix`` file (last column)."""
    text = read_text(path, limit=1 << 22) or ""
    return {cols[-1] for line in text.splitlines()[1:] if len(cols := line.split()) >= 8}


def _socket_state(root: str, path: str, table: bool) -> tuple[bool, bool]:
    """(present, live) of a Unix socket at host ``path`` under ``root``: present when a socket
    file is there or the kernel lists it; live only when ``/proc/net/unix`` lists it bound
    (the root's own table, or, for a simulated root, this host's with the root-prefixed path).
    A socket file nobody is bound to (its daemon was SIGKILLed) is present but not live."""
    try:
        full = under(root, path)
    except PathEscape:
        return False, False
    try:
        is_file = stat.S_ISSOCK(os.stat(full).st_mode)
    except OSError:
        is_file = False
    live = path in _unix_listing(under(root, "/proc/net/unix"))
    if not live and not table:
        live = under(os.path.realpath(root), path) in _unix_listing("/proc/net/unix")
    return is_file or live, live


def read(
    root: str, services: tuple[Service, ...], pidfiles: Mapping[str, str] | None = None
) -> tuple[ServiceState, ...]:
    """Liveness of each named service (``nvlsm``, ``fabricmanager``, ``imex``) under ``root``.

    ``pidfiles`` adds a pid file per service (host path, resolved under root), looked at first.
    """
    table = _has_process_table(under(root, "/proc"))
    cfg = fm_config(root) if "fabricmanager" in services or "nvlsm" in services else {}
    out = []
    for name in services:
        facts = SERVICES.get(name, ServiceFacts((name,), ()))
        extra = (pidfiles[name],) if pidfiles and name in pidfiles else ()
        found, detail = _find_process(root, facts, extra + facts.pidfiles, table)
        sock, port, stale = _endpoints(root, name, facts, cfg, table, found is not None)
        running = found is not None or bool(port) or bool(sock)
        if found is None and running:
            detail = "socket or command port present, process not found"
        elif stale:
            detail = f"stale socket {stale[0]}: no process serves it"
        out.append(ServiceState(
            name=name, running=running, pid=found[0] if found else None,
            age_s=found[1] if found else None, socket=sock, port=port,
            detail=detail or "not found",
        ))
    return tuple(out)


def _find_process(root: str, facts: ServiceFacts, pidfiles: tuple[str, ...],
                  table: bool) -> tuple[tuple[int, float | None] | None, str]:
    """(pid, age) of the service's process and how it was found (``""`` when not): a pid file
    first, then the root's process table, or, for a tree without one, this host's processes
    running a binary under the root."""
    for path in pidfiles:
        found = _from_pidfile(root, path, table)
        if found:
            return found, f"pid file {path}"
    if table:
        found = _scan(under(root, "/proc"), facts.comm)
        return found, "process " + "/".join(facts.comm) if found else ""
    found = _scan_host_for_root(root, facts.comm)
    return found, "host process running a binary under the root" if found else ""


def _endpoints(root: str, name: str, facts: ServiceFacts, cfg: Mapping[str, str], table: bool,
               has_process: bool) -> tuple[bool | None, bool | None, list[str]]:
    """(socket, port, stale sockets) of one service: NVLSM's IPC socket, fabric manager's
    command socket or TCP port; None where the service has no such endpoint. A socket file
    nobody is bound to counts only while the service's process is found."""
    sock: bool | None = None
    port: bool | None = None
    stale: list[str] = []
    if name == "nvlsm":
        ipc = cfg.get("FM_SM_IPC_INTERFACE", "")
        path = ipc if ipc.startswith("/") else facts.socket or ""
        sock, live = _socket_state(root, path, table)
        if sock and not live and not has_process:
            stale.append(path)
        sock = sock and (live or has_process)
    if name == "fabricmanager":
        unix = cfg.get("FM_CMD_UNIX_SOCKET_PATH", "")
        if unix:
            port, live = _socket_state(root, unix, table)
            if port and not live and not has_process:
                stale.append(unix)
            port = port and (live or has_process)
        else:
            number = int_or_none(cfg.get("FM_CMD_PORT_NUMBER"), high=65535)
            port = _listening_tcp(root, FM_CMD_PORT_DEFAULT if number is None else number)
    return sock, port, stale


# -- who runs a fabric daemon: the units enabled under the root ------------------------------

#: Where ``systemctl enable`` puts the wants/ links and where a mask link lives (systemctl(1),
#: "enable" and "mask": units under /etc/systemd/system).
SYSTEMD_DIRS = ("/etc/systemd/system",)


def unit_wants(root: str, unit: str) -> tuple[str, ...]:
    """The host paths of ``unit``'s ``*.wants``/``*.requires`` links under ``root`` (what
    ``systemctl enable`` made); () when it is not enabled."""
    out = []
    for d in SYSTEMD_DIRS:
        for wants in listdir(under(root, d)):
            if not wants.endswith((".wants", ".requires")):
                continue
            link = f"{d}/{wants}/{unit}"
            if fs.lexists(under(root, link)):
                out.append(link)
    return tuple(out)


def unit_masked(root: str, unit: str) -> str | None:
    """``"<link> -> /dev/null"`` when ``unit`` is masked under ``root``, else None."""
    for d in SYSTEMD_DIRS:
        link = f"{d}/{unit}"
        try:
            target = os.readlink(hostpath.resolve_parent(under(root, link)))
        except OSError:
            continue
        if target == "/dev/null":
            return f"{link} -> /dev/null"
    return None


def unit_enabled(root: str, unit: str) -> bool:
    """``unit`` starts at boot under ``root``: enabled (a wants/ link) and not masked."""
    return bool(unit_wants(root, unit)) and unit_masked(root, unit) is None


#: The pid files that say who started fabric manager: nvfabric's state directory, the
#: vendor start script's (the packaged unit's ``--fm-pid-file`` default).
_FM_PIDFILE_RUNNER = {"/run/nvfabric/fabricmanager.pid": "nvfabric",
                      "/var/run/nvidia-fabricmanager/nv-fabricmanager.pid": "unit"}


def fm_runner(fm: ServiceState | None, run_live: bool, nvfabric_unit: bool,
              fm_unit: bool) -> str:
    """Who runs fabric manager on the node (:data:`nvfabric.model.commandline.RUNNERS`): the
    pid file its running process was found by, else a live ``nvfabric run`` (``run_live``),
    else the unit enabled (``nvfabric_unit``: nvfabric.service; ``fm_unit``:
    nvidia-fabricmanager.service; nvfabric's first, it runs fabric manager itself), else
    ``none``. Pure over what was read."""
    if fm is not None and fm.detail.startswith("pid file "):
        runner = _FM_PIDFILE_RUNNER.get(fm.detail.removeprefix("pid file "))
        if runner is not None:
            return runner
    if run_live or nvfabric_unit:
        return "nvfabric"
    return "unit" if fm_unit else "none"
