"""Fake fabric daemons and tools for simulated nodes: ``nvlsm``, ``nv-fabricmanager``,
``nvidia-smi``, ``nvidia-imex``, ``nvidia-imex-ctl``.

This module is copied verbatim into ``DIR/bin/_nvfabric_fakes.py`` by
:func:`nvfabric.simulate.fakes.install`; small launchers next to it call :func:`main`. It
imports only the standard library, so a simulated tree keeps working without nvfabric.

Every fake finds its node root from its own location (``DIR/bin/<fake>`` -> ``DIR``) and keeps
the simulated state under ``DIR/var/lib/nvfabric-sim/``:

- ``node.json``: driver version, fabric kind, versions of the daemons, IMEX local addresses;
- ``gpus.json``: per GPU pci, uuid, name, state (not_supported, not_started, in_progress,
  completed), status, clique id, ClusterUUID, health summary (written by the fake fabric
  manager, read by the fake nvidia-smi);
- ``faults.json``: injected faults per program (also ``$NVFABRIC_FAKE_FAULTS``, same JSON,
  merged over the file): ``crash_after_s``, ``exit_code``, ``ignore_sigterm``, ``stop_delay_s``
  for any daemon; nvlsm ``socket_delay_s``, ``no_socket``; fabricmanager ``version``,
  ``register_delay_s``, ``stuck``; imex ``peers`` (``up``/``down``), ``local_ips``;
  imex-ctl and nvidia-smi ``hang``; imex-ctl ``ready_delay_s`` (``-q`` says NOT READY for that
  long after the daemon came up while ``-N`` already shows the domain UP: the lag between the
  local daemon's answer and the peers' view);
- ``calls.jsonl``: one JSON line per event (exec, socket created, registered), with the wall
  time, for tests and benchmarks.

Output lines follow the real ones where a capture exists (../shared/corpus/logs: the
NV_WARN_NOTHING_TO_DO line, the version mismatch line, "Connected to 1 node.", the success
line, the OpenSM banner, the umad_init ibwarn line; ../shared/corpus/imex: IMEX start-up and
the "No matching network interface" error; ../shared/corpus/nvidia-smi for the -q text, the
-q -x XML and the CSV query). Lines for which no capture exists are marked ``[fake]``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

STATE_DIR = "var/lib/nvfabric-sim"
NVLSM_SOCKET = "/var/run/nvidia-fabricmanager/fm_sm_ipc.socket"
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
NVLSM_VERSION = "2025.06.5_eb3b4ba_df9bb3c_ae214d2"
STATE_TEXT = {
    "not_supported": "N/A",
    "not_started": "Not Started",
    "in_progress": "In Progress",
    "completed": "Completed",
}

# ----------------------------------------------------------------------------- node state


#: The simulated root when the launcher gave it (the single-file binary: its launchers are
#: ``#!/path/to/nvfabric --nvfabric-sim-fake`` scripts, see :mod:`nvfabric.frozen`); None
#: for the Python launchers, whose root is found from this file's copy in ``DIR/bin``.
ROOT: str | None = None


def node_root() -> str:
    """The simulated root: :data:`ROOT` when set, else the parent of the directory holding
    this file (``DIR/bin``)."""
    if ROOT is not None:
        return ROOT
    return os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def host(root: str, path: str) -> str:
    """A built-in host path (``/var/run/...``) under the simulated root."""
    return os.path.join(root, path.lstrip("/"))


def state_path(root: str, name: str) -> str:
    return os.path.join(root, STATE_DIR, name)


def load(root: str, name: str, default: Any) -> Any:
    try:
        with open(state_path(root, name), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return default


def save(root: str, name: str, data: Any) -> None:
    """Atomic JSON write (temp file + rename), so a reader never sees half a file."""
    path = state_path(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
    os.replace(tmp, path)


def faults(root: str, prog: str) -> dict[str, Any]:
    """The faults injected for ``prog``: the fault file, then ``$NVFABRIC_FAKE_FAULTS``."""
    out: dict[str, Any] = dict(load(root, "faults.json", {}).get(prog, {}))
    env = os.environ.get("NVFABRIC_FAKE_FAULTS")
    if env:
        with contextlib.suppress(ValueError, AttributeError):
            out.update(json.loads(env).get(prog, {}))
    return out


def record(root: str, prog: str, event: str, **extra: Any) -> None:
    """Append one event to ``calls.jsonl`` (one write, so lines never interleave)."""
    entry = {"prog": prog, "event": event, "pid": os.getpid(), "t": time.time(), **extra}
    path = state_path(root, "calls.jsonl")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
    finally:
        os.close(fd)


def driver_version(root: str) -> str | None:
    for rel in ("sys/module/nvidia/version",):
        with contextlib.suppress(OSError):
            with open(os.path.join(root, rel), encoding="utf-8") as fh:
                return fh.read().strip() or None
    return None


def port_guids(root: str) -> list[str]:
    """Port GUIDs of the simulated IB ports (last 64 bits of ``gids/0``)."""
    out = []
    base = os.path.join(root, "sys/class/infiniband")
    for dev in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        ports = os.path.join(base, dev, "ports")
        for port in sorted(os.listdir(ports)) if os.path.isdir(ports) else []:
            with contextlib.suppress(OSError):
                with open(os.path.join(ports, port, "gids/0"), encoding="utf-8") as fh:
                    digits = fh.read().strip().replace(":", "")
                out.append("0x" + digits[16:].lower())
    return out


@contextlib.contextmanager
def short_path(path: str) -> Any:
    """A name for ``path`` that fits in sockaddr_un (108 bytes): the path itself when short,
    else ``/proc/self/fd/N/<name>`` through an O_PATH descriptor of its directory."""
    if len(os.fsencode(path)) < 100:
        yield path
        return
    fd = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{os.path.basename(path)}"
    finally:
        os.close(fd)


def say(text: str, stream: Any = None) -> None:
    out = stream if stream is not None else sys.stdout
    with contextlib.suppress(OSError, ValueError):
        out.write(text + "\n")
        out.flush()


def stamp(tid: int) -> str:
    """fabric manager / IMEX log prefix: ``[Dec 19 2024 22:08:53] [INFO] [tid 1570]``."""
    return time.strftime("[%b %d %Y %H:%M:%S]") + f" [INFO] [tid {tid}]"


def init_stamp() -> str:
    """``12/19/2024 22:08:53.808`` as in "Fabric Manager Log initializing at:"."""
    now = time.time()
    tm = time.localtime(now)
    return (f"{tm.tm_mon}/{tm.tm_mday}/{tm.tm_year} "
            f"{time.strftime('%H:%M:%S', tm)}.{int(now * 1000) % 1000:03d}")


def read_cfg(path: str) -> dict[str, str]:
    """KEY=VALUE config (fabricmanager.cfg, IMEX config.cfg); first occurrence wins."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for raw in fh:
            line = raw.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), value.strip())
    return out


class Daemon:
    """The life of a fake daemon: SIGTERM handling (or ignoring), a crash timer, a loop.

    The signal handlers only set a flag (no lock, no threading primitive: a handler runs
    between two bytecodes of the main thread, which may hold that very lock, e.g. inside
    ``threading.Event.wait``, and would deadlock); the signal's byte on a self-pipe
    (``signal.set_wakeup_fd``) wakes the loop's ``select`` at once, and the loop also checks
    the flag every 50 ms.
    """

    def __init__(self, root: str, prog: str) -> None:
        self.root = root
        self.prog = prog
        self.faults = faults(root, prog)
        self.started = time.monotonic()
        self.stopping = False
        self._wake_r, wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        if self.faults.get("ignore_sigterm"):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        else:
            signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)

    def _on_stop(self, signum: int, frame: Any) -> None:
        self.stopping = True

    def crash_due(self) -> bool:
        after = self.faults.get("crash_after_s")
        return after is not None and time.monotonic() - self.started >= float(after)

    def crash(self) -> int:
        say(f"[fake] {self.prog}: simulated crash after {self.faults.get('crash_after_s')} s")
        return int(self.faults.get("exit_code", 1))

    def wait(self, seconds: float, fds: list[Any] | None = None,
             on_ready: Callable[[Any], None] | None = None) -> bool:
        """Sleep up to ``seconds``, serving ``fds``; False when stopping or crashing."""
        deadline = time.monotonic() + seconds
        while not self.stopping and not self.crash_due():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            with contextlib.suppress(InterruptedError, OSError, ValueError):
                ready, _, _ = select.select([self._wake_r, *(fds or [])], [], [],
                                            min(left, 0.05))
                for f in ready:
                    if f == self._wake_r:
                        with contextlib.suppress(OSError):
                            os.read(self._wake_r, 512)
                    elif on_ready is not None:
                        on_ready(f)
        return False

    def shutdown_delay(self) -> None:
        time.sleep(float(self.faults.get("stop_delay_s", 0)))


def daemonize(lifetime_s: float) -> bool:
    """DAEMONIZE=1: fork; the parent returns True (and exits 0, as a forking daemon's launcher
    does); the child detaches and lives at most ``lifetime_s`` (a fake's limit)."""
    if os.fork() > 0:
        return True
    os.setsid()
    signal.signal(signal.SIGALRM, lambda *_: os._exit(0))
    signal.alarm(max(1, int(lifetime_s)))
    return False


# ----------------------------------------------------------------------------- nvlsm


def nvlsm(argv: list[str]) -> int:
    """Fake NVLSM (OpenSM derivative): ``-F/--config``, ``-g/--guid``, ``--pid_file``,
    ``-f/--log_file``. Prints the OpenSM banner, checks ib_umad and the GUID, writes its pid
    file, creates and serves the FM-SM IPC socket after ``socket_delay_s``."""
    root = node_root()
    record(root, "nvlsm", "exec", argv=argv)
    opts = _options(argv, {"-F": "config", "--config": "config", "-g": "guid", "--guid": "guid",
                           "--pid_file": "pid_file", "-f": "log_file", "--log_file": "log_file"})
    if opts is None:
        say("Usage: nvlsm [-F config] [-g GUID] [--pid_file path] [-f log_file]  [fake]")
        return 1
    d = Daemon(root, "nvlsm")
    node = load(root, "node.json", {})
    say("-------------------------------------------------")
    say(f"OpenSM {node.get('nvlsm_version', NVLSM_VERSION)}")
    conf = opts.get("config", "/usr/share/nvidia/nvlsm/nvlsm.conf")
    say(f"Config file is `{conf}`:")
    if not os.path.isfile(conf):
        say(f"[fake] cannot open config file {conf}")
        return 1
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
        return 1
    if not guid or guid.lower() not in port_guids(root):
        say(f"[fake] port GUID {guid} is not a port of this node; cannot bind")
        return 1
    if "pid_file" in opts:
        with contextlib.suppress(OSError):
            with open(opts["pid_file"], "w", encoding="utf-8") as fh:
                fh.write(f"{os.getpid()}\n")
    save(root, "nvlsm.json", {"pid": os.getpid(), "guid": guid.lower()})
    say("Entering DISCOVERING state")
    path = d.faults.get("socket_path") or host(root, NVLSM_SOCKET)
    listener: socket.socket | None = None
    clients: list[socket.socket] = []
    if not d.wait(float(d.faults.get("socket_delay_s", 0.05))):
        return d.crash() if d.crash_due() else _nvlsm_exit(d, opts, None, path)
    if not d.faults.get("no_socket"):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with short_path(path) as name:
            listener.bind(name)
        listener.listen(8)
        record(root, "nvlsm", "socket", path=path)
    say("Entering MASTER state")
    say("SUBNET UP")
    _spawn_orphans(root, int(d.faults.get("spawn_orphans", 0)))

    def serve(f: Any) -> None:
        if f is listener and listener is not None:
            conn, _ = listener.accept()
            clients.append(conn)
        else:
            with contextlib.suppress(OSError):
                if not f.recv(4096):
                    clients.remove(f)
                    f.close()

    while d.wait(3600, [listener, *clients] if listener else None, serve):
        pass
    if d.crash_due():
        return d.crash()
    return _nvlsm_exit(d, opts, listener, path)


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


def _nvlsm_exit(d: Daemon, opts: dict[str, str], listener: socket.socket | None,
                path: str) -> int:
    say("Exiting SM")
    d.shutdown_delay()
    if listener is not None:
        listener.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
    if "pid_file" in opts:
        with contextlib.suppress(OSError):
            os.unlink(opts["pid_file"])
    return 0


def _options(argv: list[str], names: dict[str, str],
             flags: frozenset[str] = frozenset()) -> dict[str, str] | None:
    """``-x VALUE`` / ``--long VALUE`` / ``--long=VALUE`` options; None on an unknown one."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in flags:
            out[arg] = "1"
            i += 1
            continue
        key, eq, value = arg.partition("=")
        if eq and key in names:
            out[names[key]] = value
            i += 1
        elif arg in names and i + 1 < len(argv):
            out[names[arg]] = argv[i + 1]
            i += 2
        else:
            return None
    return out


# ----------------------------------------------------------------------------- fabric manager


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
    opts = _options(argv, {"-c": "config", "--config": "config", "-g": "guid",
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
    say(f"Fabric Manager Log initializing at: {init_stamp()}", log)
    say(f"{stamp(tid)} Fabric Manager version {version} is running with the following "
        "configuration options", log)
    for key, text in (("LOG_LEVEL", "Logging level"), ("LOG_FILE_NAME", "Logging file name/path"),
                      ("FABRIC_MODE", "Fabric Mode"), ("DAEMONIZE", "Daemonize")):
        say(f"{stamp(tid)} {text} = {cfg.get(key, '')}", log)
    # R06: fabric manager makes its runtime directory private.
    runtime = host(root, FM_RUNTIME_DIR)
    if os.path.isdir(runtime):
        with contextlib.suppress(OSError):
            os.chmod(runtime, 0o700)
    driver = driver_version(root)
    if driver != version:
        line = (f"fabric manager NVIDIA GPU driver interface version {version} don't match with "
                f"driver version {driver}. Please update with matching NVIDIA driver package.")
        say(line)
        say(f"{stamp(tid)} {line}", log)
        return 1
    node_cfg = cfg.get("FABRIC_NODE_CONFIG_FILE", "")
    for key in ("TOPOLOGY_FILE_PATH", "DATABASE_PATH"):
        if cfg.get(key) and not os.path.isdir(cfg[key]):
            say(f"fabric manager config file item: {key} has an invalid value")
            return 1
    if node_cfg and not os.path.isfile(node_cfg):
        say("fabric manager config file item: FABRIC_NODE_CONFIG_FILE has an invalid value")
        return 1
    fabric = node.get("fabric", "nvswitch")
    guid = opts.get("guid")
    conn: socket.socket | None = None
    if fabric not in ("nvswitch", "nvlink5") or (fabric == "nvlink5" and not guid):
        say(NOTHING_TO_DO)
        return 1
    if fabric == "nvlink5":
        sm = load(root, "nvlsm.json", {})
        path = cfg.get("FM_SM_IPC_INTERFACE") or host(root, NVLSM_SOCKET)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with short_path(path) as name:
                conn.connect(name)
        except OSError as err:
            say(f"[fake] failed to connect to NVLink Subnet Manager IPC socket {path}: "
                f"{err.strerror}")
            return 1
        if str(guid).lower() != sm.get("guid"):
            say(f"[fake] management port GUID {guid} differs from NVLSM's {sm.get('guid')}")
            return 1
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


def _open_log(path: str) -> Any:
    """FM's log file; stderr when the path is empty or cannot be opened (the shipped cfg's
    comment on LOG_FILE_NAME)."""
    if path:
        with contextlib.suppress(OSError):
            return open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the fake
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


# ----------------------------------------------------------------------------- nvidia-smi


def nvidia_smi(argv: list[str]) -> int:
    """Fake ``nvidia-smi``: ``-q`` (text), ``-q -x`` (XML), ``--query-gpu=F,.. --format=csv``,
    ``-L``, ``-r`` (GPU reset: fabric state back to not started)."""
    root = node_root()
    flt = faults(root, "nvidia-smi")
    if flt.get("hang"):
        time.sleep(3600)
    driver = driver_version(root)
    if driver is None:
        say("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.")
        return 9
    node = load(root, "node.json", {})
    gpus: list[dict[str, Any]] = load(root, "gpus.json", {"gpus": []}).get("gpus", [])
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    if "--query-gpu" in argv:
        i = argv.index("--query-gpu")
        query = argv[i + 1] if i + 1 < len(argv) else ""
    fmt = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), "csv")
    if query is not None:
        return _smi_csv(gpus, node, driver, query, fmt)
    if "-r" in argv or "--gpu-reset" in argv:
        data = load(root, "gpus.json", {"gpus": []})
        for gpu in data.get("gpus", []):
            if gpu.get("state") != "not_supported":
                gpu.update(state="not_started", status="N/A", clique_id=None, cluster_uuid=None,
                           health="N/A")
            say(f"GPU {gpu['pci']} was successfully reset.")
        save(root, "gpus.json", data)
        record(root, "nvidia-smi", "reset")
        say("All done.")
        return 0
    if "-L" in argv or "--list-gpus" in argv:
        for i, gpu in enumerate(gpus):
            say(f"GPU {i}: {gpu['name']} (UUID: {gpu['uuid']})")
        return 0
    if "-q" in argv or "--query" in argv:
        if "-x" in argv or "--xml-format" in argv:
            say(_smi_xml(gpus, node, driver))
        else:
            say(_smi_text(gpus, node, driver))
        return 0
    say(f"NVIDIA-SMI {driver}    Driver Version: {driver}    CUDA Version: "
        f"{node.get('cuda_version', '12.8')}   [fake: summary table omitted]")
    return 0


def _fabric_values(gpu: dict[str, Any]) -> dict[str, str]:
    state = str(gpu.get("state", "not_supported"))
    na = "N/A"
    clique = gpu.get("clique_id")
    return {
        "state": STATE_TEXT.get(state, na),
        "status": str(gpu.get("status") or na),
        "clique": na if clique is None else str(clique),
        "cluster": str(gpu.get("cluster_uuid") or na),
        "summary": str(gpu.get("health") or na),
        "bandwidth": "Full" if gpu.get("health") == "Healthy" and state == "completed" else na,
        "flag": "False" if state == "completed" else na,
    }


def _kv(indent: int, key: str, value: str) -> str:
    """One ``-q`` line: key column 42 wide (535/560 layout, ../shared/cases/S*.yaml)."""
    return (" " * indent + key).ljust(42) + f": {value}"


def _smi_text(gpus: list[dict[str, Any]], node: dict[str, Any], driver: str) -> str:
    lines = ["", "==============NVSMI LOG==============", "",
             _kv(0, "Timestamp", time.strftime("%a %b %d %H:%M:%S %Y")),
             _kv(0, "Driver Version", driver),
             _kv(0, "CUDA Version", str(node.get("cuda_version", "12.8"))), "",
             _kv(0, "Attached GPUs", str(len(gpus)))]
    for gpu in gpus:
        f = _fabric_values(gpu)
        lines += [
            f"GPU {gpu['pci']}",
            _kv(4, "Product Name", gpu["name"]),
            _kv(4, "Product Brand", "NVIDIA"),
            _kv(4, "Product Architecture", gpu.get("architecture", "N/A")),
            _kv(4, "Persistence Mode", "Enabled"),
            _kv(4, "GPU UUID", gpu["uuid"]),
            _kv(4, "Minor Number", str(gpu.get("minor", 0))),
            "    Fabric",
            _kv(8, "State", f["state"]),
            _kv(8, "Status", f["status"]),
            _kv(8, "CliqueId", f["clique"]),
            _kv(8, "ClusterUUID", f["cluster"]),
            "        Health",
            _kv(12, "Summary", f["summary"]),
            _kv(12, "Bandwidth", f["bandwidth"]),
            _kv(12, "Route Recovery in progress", f["flag"]),
            _kv(12, "Route Unhealthy", f["flag"]),
            _kv(12, "Access Timeout Recovery", f["flag"]),
            _kv(4, "Processes", "None"),
            "",
        ]
    return "\n".join(lines)


def _smi_xml(gpus: list[dict[str, Any]], node: dict[str, Any], driver: str) -> str:
    from xml.sax.saxutils import escape

    out = ['<?xml version="1.0" ?>',
           '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">',
           "<nvidia_smi_log>",
           f"\t<timestamp>{time.strftime('%a %b %d %H:%M:%S %Y')}</timestamp>",
           f"\t<driver_version>{escape(driver)}</driver_version>",
           f"\t<cuda_version>{escape(str(node.get('cuda_version', '12.8')))}</cuda_version>",
           f"\t<attached_gpus>{len(gpus)}</attached_gpus>"]
    for gpu in gpus:
        f = _fabric_values(gpu)
        bus = gpu["pci"].split(":")
        out += [
            f'\t<gpu id="{escape(gpu["pci"])}">',
            f"\t\t<product_name>{escape(gpu['name'])}</product_name>",
            "\t\t<product_brand>NVIDIA</product_brand>",
            f"\t\t<product_architecture>{escape(gpu.get('architecture', 'N/A'))}"
            "</product_architecture>",
            "\t\t<persistence_mode>Enabled</persistence_mode>",
            f"\t\t<uuid>{escape(gpu['uuid'])}</uuid>",
            f"\t\t<minor_number>{gpu.get('minor', 0)}</minor_number>",
            "\t\t<pci>",
            f"\t\t\t<pci_bus>{bus[1]}</pci_bus>",
            f"\t\t\t<pci_device>{bus[2].split('.')[0]}</pci_device>",
            f"\t\t\t<pci_domain>{bus[0][-4:]}</pci_domain>",
            f"\t\t\t<pci_device_id>{gpu.get('device_id', '0000').upper()}10DE</pci_device_id>",
            f"\t\t\t<pci_bus_id>{escape(gpu['pci'])}</pci_bus_id>",
            "\t\t</pci>",
            "\t\t<fabric>",
            f"\t\t\t<state>{f['state']}</state>",
            f"\t\t\t<status>{escape(f['status'])}</status>",
            f"\t\t\t<cliqueId>{f['clique']}</cliqueId>",
            f"\t\t\t<clusterUuid>{escape(f['cluster'])}</clusterUuid>",
            "\t\t\t<health>",
            f"\t\t\t\t<summary>{escape(f['summary'])}</summary>",
            f"\t\t\t\t<bandwidth>{f['bandwidth']}</bandwidth>",
            f"\t\t\t\t<route_recovery_in_progress>{f['flag']}</route_recovery_in_progress>",
            f"\t\t\t\t<route_unhealthy>{f['flag']}</route_unhealthy>",
            f"\t\t\t\t<access_timeout_recovery>{f['flag']}</access_timeout_recovery>",
            "\t\t\t\t<incorrect_configuration>N/A</incorrect_configuration>",
            "\t\t\t\t<partition_assigned>N/A</partition_assigned>",
            "\t\t\t</health>",
            "\t\t</fabric>",
            "\t\t<processes>",
            "\t\t</processes>",
            "\t</gpu>",
        ]
    out += ["", "</nvidia_smi_log>"]
    return "\n".join(out)


_CSV_FIELDS: dict[str, Callable[[int, dict[str, Any], str], str]] = {
    "index": lambda i, g, d: str(i),
    "name": lambda i, g, d: str(g["name"]),
    "uuid": lambda i, g, d: str(g["uuid"]),
    "gpu_uuid": lambda i, g, d: str(g["uuid"]),
    "pci.bus_id": lambda i, g, d: str(g["pci"]),
    "driver_version": lambda i, g, d: d,
    "fabric.state": lambda i, g, d: _fabric_values(g)["state"],
    "fabric.status": lambda i, g, d: _fabric_values(g)["status"],
    "fabric.cliqueId": lambda i, g, d: _fabric_values(g)["clique"],
    "fabric.clusterUuid": lambda i, g, d: _fabric_values(g)["cluster"],
}


def _smi_csv(gpus: list[dict[str, Any]], node: dict[str, Any], driver: str, query: str,
             fmt: str) -> int:
    fields = [f.strip() for f in query.split(",") if f.strip()]
    for name in fields:
        if name not in _CSV_FIELDS:
            say(f'Field "{name}" is not a valid field to query.')
            say("")
            return 2
    if "noheader" not in fmt.split(","):
        say(", ".join(fields))
    for i, gpu in enumerate(gpus):
        say(", ".join(_CSV_FIELDS[name](i, gpu, driver) for name in fields))
    return 0


# ----------------------------------------------------------------------------- IMEX


def nvidia_imex(argv: list[str]) -> int:
    """Fake ``nvidia-imex -c <config.cfg>``: reads IMEX_NODE_CONFIG_FILE, fails with the real
    "No matching network interface" error when no entry is a local address, otherwise serves
    until SIGTERM and publishes its status for ``nvidia-imex-ctl`` in ``imex.json``."""
    root = node_root()
    record(root, "imex", "exec", argv=argv)
    opts = _options(argv, {"-c": "config", "--config": "config"})
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
    log = sys.stderr
    log_name = cfg.get("LOG_FILE_NAME", "")
    if log_name:
        try:
            log = open(log_name, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the fake
        except OSError:
            say("WARNING: failed to open IMEX log file  errno = No such file or directory")
            say("INFO: using stderr for IMEX logging")
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
    if me is None:
        say(time.strftime("[%b %d %Y %H:%M:%S]") + f" [ERROR] [tid {tid}] No matching network "
            "interface found for any IP addresses in the node configuration file", log)
        return 1
    peers_up = flt.get("peers", "up") == "up"
    nodes = {str(i): {"status": "READY" if (i == me or peers_up) else "UNAVAILABLE",
                      "host": entry, "version": version} for i, entry in enumerate(entries)}
    status = "UP" if all(n["status"] == "READY" for n in nodes.values()) else "DEGRADED"
    save(root, "imex.json", {"pid": os.getpid(), "self": str(me), "status": status,
                             "nodes": nodes, "since": time.time()})
    while d.wait(3600):
        pass
    save(root, "imex.json", {"pid": None, "status": "DOWN", "nodes": {}})
    if d.crash_due():
        return d.crash()
    d.shutdown_delay()
    return 0


def _hostname(root: str) -> str:
    """The node's host name from its ``etc/hostname`` (first line), "" when absent: the same
    file nvfabric reads (nvfabric.facts.imexhost.local_names), so a tree whose host name was set
    is one host for both."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        with open(os.path.join(root, "etc/hostname"), encoding="utf-8") as fh:
            return fh.readline().strip()
    return ""


def _fib_trie(root: str) -> list[str]:
    """The node's IPv4 addresses from its ``proc/net/fib_trie`` (``|-- A.B.C.D`` then
    ``/32 host LOCAL``), [] when the file is absent."""
    out: list[str] = []
    leaf = None
    with contextlib.suppress(OSError):
        with open(os.path.join(root, "proc/net/fib_trie"), encoding="utf-8") as fh:
            for line in fh:
                text = line.strip()
                if text.startswith("|-- "):
                    leaf = text[4:]
                elif leaf and text.startswith("/32 host LOCAL") and leaf not in out:
                    out.append(leaf)
    return out


#: The legend ``nvidia-imex-ctl -N`` prints first, as printed (its typo "triggreed" kept).
#: Capture: ../shared/corpus/imex/aws-pcluster-p6e-gb200-18node-imex-ctl-N-570.172.txt.
CTL_LEGEND = """\
Connectivity Table Legend:
I - Invalid - Node wasn't reachable, no connection status available
N - Never Connected
R - Recovering - Connection was lost, but clean up has not yet been triggered.
D - Disconnected - Connection was lost, and clean up has been triggreed.
A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.
!V! - Version mismatch, communication disabled.
!M! - Node map mismatch, communication disabled.
C - Connected - Ready for operation
"""

#: Matrix letter -> connection status of the ``-N -j`` form: CONNECTED as in the DCGM samples
#: (../shared/corpus/imex/dcgm-test-imex-ctl-N-j-*.json); INVALID is [fake wording].
LINK_STATUS = {"C": "CONNECTED", "I": "INVALID"}


def imex_links(nodes: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The fake domain's connection matrix, ``{from: {to: letter}}``: C where both ends are
    READY (a node to itself when READY), I (no connection status available) otherwise. Both
    forms of ``-N`` render this one matrix."""
    ready = {k for k, v in nodes.items() if v["status"] == "READY"}
    return {src: {dst: "C" if src in ready and dst in ready else "I" for dst in nodes}
            for src in nodes}


def imex_domain_text(state: dict[str, Any], status: str, stamp_: str) -> str:
    """``nvidia-imex-ctl -N``: legend, timestamp, node lines, From/To matrix, domain state
    (layout of the 570.172 capture named at :data:`CTL_LEGEND`)."""
    nodes = state.get("nodes") or {}
    ids = sorted(nodes, key=int)
    lines = [CTL_LEGEND, stamp_, "Nodes:"]
    for k in ids:
        v = nodes[k]
        lines.append(f"Node #{k:<4}- {v['host']:<16}- {v['status']:<21}- Version: "
                     f"{v['version']}")
    if ids:
        links = imex_links(nodes)
        lines.append("")
        lines.append((" Nodes From\\To  " + "".join(f"{k:<4}" for k in ids)).rstrip())
        for src in ids:
            cells = "".join(f"{links[src][dst]:<4}" for dst in ids)
            lines.append(f"{src:>8}        {cells}".rstrip())
    lines += ["", f"Domain State: {status}"]
    return "\n".join(lines)


def imex_domain_json(state: dict[str, Any], status: str, stamp_: str) -> str:
    """``nvidia-imex-ctl -N -j``: the same domain as :func:`imex_domain_text`, in the shape
    of the DCGM samples (per node status, host, connections, changed, version, hostName)."""
    nodes = state.get("nodes") or {}
    links = imex_links(nodes)
    out = {
        k: {"status": v["status"], "host": v["host"],
            "connections": {dst: {"host": nodes[dst]["host"],
                                  "status": LINK_STATUS[letter], "changed": False}
                            for dst, letter in links[k].items()},
            "changed": False, "version": v["version"], "hostName": ""}
        for k, v in nodes.items()
    }
    return json.dumps({"nodes": out, "timestamp": stamp_, "status": status},
                      separators=(",", ":"))


def nvidia_imex_ctl(argv: list[str]) -> int:
    """Fake ``nvidia-imex-ctl``: ``-q`` prints READY when the local daemon runs and every node
    is connected; ``-N`` prints the node table and connection matrix
    (:func:`imex_domain_text`); ``-N -j`` the same as JSON (:func:`imex_domain_json`).
    Fault ``hang``: never answers."""
    root = node_root()
    if faults(root, "imex-ctl").get("hang"):
        time.sleep(3600)
        return 1
    state = load(root, "imex.json", {"pid": None, "status": "DOWN", "nodes": {}})
    alive = bool(state.get("pid")) and _alive(int(state["pid"]))
    status = state.get("status", "DOWN") if alive else "DOWN"
    if not alive:
        state = {"nodes": {}}
    if "-q" in argv:
        lag = float(faults(root, "imex-ctl").get("ready_delay_s", 0))
        ready = status == "UP" and time.time() - float(state.get("since", 0)) >= lag
        say("READY" if ready else "NOT READY  [fake wording]")
        return 0 if ready else 1
    if "-N" in argv:
        render = imex_domain_json if "-j" in argv else imex_domain_text
        say(render(state, status, init_stamp()))
        return 0
    say("[fake] usage: nvidia-imex-ctl -q | -N [-j]")
    return 1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


PROGRAMS: dict[str, Callable[[list[str]], int]] = {
    "nvlsm": nvlsm,
    "nv-fabricmanager": fabricmanager,
    "nvidia-smi": nvidia_smi,
    "nvidia-imex": nvidia_imex,
    "nvidia-imex-ctl": nvidia_imex_ctl,
}


def main(prog: str, argv: list[str], root: str | None = None) -> int:
    """Entry point of the launchers: run fake ``prog`` with ``argv`` (without argv[0]);
    ``root`` is the simulated root when the launcher knows it (else found from this file)."""
    global ROOT
    if root is not None:
        ROOT = root
    if prog not in PROGRAMS:
        say(f"[fake] unknown simulated program {prog!r}; known: {', '.join(PROGRAMS)}", sys.stderr)
        return 2
    try:
        return PROGRAMS[prog](argv)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
