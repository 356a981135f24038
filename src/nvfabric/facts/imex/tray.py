"""IMEX facts of a node, read under a root directory (default ``/``); nothing here writes.

Reads: the owner evidence (systemd wants/ links and masks of the host unit, the DRA driver's
kubelet plugin state and the IMEX mode its process runs with, slurm.conf and the scripts it
runs (:mod:`nvfabric.facts.slurm`), a live nvfabric run's lock, ready and pid files, the
nvidia-imex processes), the channel nodes and
/proc/driver/nvidia/params, the IMEX config and node list files, the node's addresses and
names, the host unit's file and enablement (``nvidia-imex-ctl`` answers:
:func:`nvfabric.facts.imex.ctl.run_ctl`). The changes (channel nodes, config writes, unit
enablement) are :mod:`nvfabric.effects.imex`.

The door between the node itself and a simulated tree is :func:`nvfabric.model.hostpath.is_live`
(the root's ``proc`` is the running kernel's): a live root's addresses come from its
interfaces (psutil), its names from gethostname() and the resolver; a tree's from its own
``proc/net/fib_trie``, ``proc/net/if_inet6``, ``etc/hostname`` and ``etc/hosts``.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterable
from typing import Any

from nvfabric.effects import program
from nvfabric.effects.imex import SYSTEMCTL_MAX_BYTES, SYSTEMCTL_TIMEOUT_S, stat_node
from nvfabric.effects.runlock import live_ready, run_lock_holder
from nvfabric.facts import procs, services
from nvfabric.facts import slurm as slurm_reader
from nvfabric.facts.fs import is_dir, is_file, listdir, read_bytes, read_text
from nvfabric.facts.nvidia import driver_version, imex_major, loaded_modules
from nvfabric.model import hostpath, strict
from nvfabric.model.commandline import IMEX_UNIT
from nvfabric.model.errors import usage_error
from nvfabric.model.hostpath import PathEscape, is_live, under
from nvfabric.model.strict import int_or_none
from nvfabric.model.words import plural
from nvfabric.rules.imex import config, nodes, owner, report
from nvfabric.rules.imex import slurm as slurm_rules
from nvfabric.rules.imex.channels import ChannelFacts, parse_params
from nvfabric.rules.imex.owner import DraMode, OwnerEvidence, RunFacts
from nvfabric.rules.imex.tables import (
    CAPS_DIR,
    CHANNEL_DIR,
    CONFIG_PATH,
    DRA_HOST_SOCKET,
    DRA_KUBELET_PLUGIN,
    DRA_PLUGIN_DIRS,
    NODES_CONFIG_PATH,
    NVFABRIC_SLURM_DEFAULTS,
    NVFABRIC_SLURM_STATE_DIR,
    NVFABRIC_STATE_DIR,
    PARAMS_PATH,
    RUN_OWNER_FILE,
)

# -- owner evidence ---------------------------------------------------------------------------


def gather_evidence(root: str) -> OwnerEvidence:
    """Owner evidence of the node under ``root`` (host paths in the lines): the DRA driver's
    kubelet plugin state and IMEX mode, the host unit's links, Slurm
    (:func:`nvfabric.facts.slurm.read`), a live nvfabric run and the nvidia-imex processes."""
    slurm_facts = slurm_reader.read(root)
    return OwnerEvidence(
        dra=_dra_evidence(root),
        unit_enabled=services.unit_wants(root, IMEX_UNIT),
        unit_masked=services.unit_masked(root, IMEX_UNIT),
        slurm=slurm_facts,
        dra_mode=_dra_mode(root),
        run=live_run(root),
        daemons=services.pids(root, services.SERVICES["imex"].comm),
    )


def _dra_evidence(root: str) -> tuple[str, ...]:
    out = []
    for d in DRA_PLUGIN_DIRS:
        path = under(root, d)
        if not is_dir(path):
            continue
        parts = []
        if is_file(os.path.join(path, "checkpoint.json")):
            parts.append("checkpoint.json")
        domains = listdir(os.path.join(path, "domains"))
        if domains:
            parts.append(plural(len(domains), "ComputeDomain"))
        out.append(f"kubelet plugin state {d}" + (f" ({', '.join(parts)})" if parts else ""))
    return tuple(out)


def _dra_mode(root: str) -> DraMode | None:
    """The IMEX mode the DRA driver's kubelet plugin runs with: its ``--imex-mode`` flag, else
    its ``IMEX_MODE`` environment (default ``driverManaged``), and the host path of the socket
    it queries (``--imex-host-socket-path`` / ``IMEX_HOST_SOCKET_PATH``, default
    /etc/nvidia-imex/imex_ctrl.sock, under its ``--nvidia-driver-root`` / ``NVIDIA_DRIVER_ROOT``,
    default /). Source: kubernetes-sigs/dra-driver-nvidia-gpu,
    cmd/compute-domain-kubelet-plugin/main.go (the flags and their environment variables)."""
    for p in procs.by_name(root, (DRA_KUBELET_PLUGIN[:15],)):
        if not p.argv or os.path.basename(p.argv[0]) != DRA_KUBELET_PLUGIN:
            continue
        flags = _flags(p.argv[1:])
        mode = flags.get("imex-mode") or p.env.get("IMEX_MODE") or "driverManaged"
        socket_path = (flags.get("imex-host-socket-path") or p.env.get("IMEX_HOST_SOCKET_PATH")
                       or DRA_HOST_SOCKET)
        driver_root = (flags.get("nvidia-driver-root") or flags.get("host_driver-root")
                       or p.env.get("NVIDIA_DRIVER_ROOT") or p.env.get("HOST_DRIVER_ROOT") or "/")
        full = os.path.normpath(os.path.join(driver_root, socket_path.lstrip("/")))
        if hostpath.problem(full) is not None:
            full = DRA_HOST_SOCKET
        where = f"{DRA_KUBELET_PLUGIN} (pid {p.pid}) runs with IMEX mode {mode}"
        if mode == "hostManaged":
            where += f", command socket {full}"
        return DraMode(mode, full, where)
    return None


def _flags(args: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``--name=value`` and ``--name value`` flags of a command line (urfave/cli's forms)."""
    out: dict[str, str] = {}
    args = list(args)
    for i, arg in enumerate(args):
        if not arg.startswith("-"):
            continue
        name, sep, value = arg.lstrip("-").partition("=")
        if sep:
            out[name] = value
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):
            out[name] = args[i + 1]
    return out


def live_run(root: str) -> RunFacts | None:
    """A live ``nvfabric run`` supervising nvidia-imex under ``root``: the holder of the run
    lock in nvfabric.service's state directory or in the one nvfabric's Slurm prolog uses
    (its settings' ``NVFABRIC_STATE_DIR``), whose nvidia-imex runs (its pid file
    ``imex.pid`` there, or the ready file's services). A run that holds the lock but runs no
    nvidia-imex (it defers to another owner) is none."""
    settings = slurm_rules.parse_settings(read_text(under(root, NVFABRIC_SLURM_DEFAULTS),
                                                    limit=1 << 16) or "")
    slurm_dir = settings.get("NVFABRIC_STATE_DIR") or NVFABRIC_SLURM_STATE_DIR
    for state_dir, by_slurm in ((NVFABRIC_STATE_DIR, False), (slurm_dir, True)):
        if hostpath.problem(state_dir) is not None:
            continue
        try:
            full = under(root, state_dir)
            holder = run_lock_holder(full)
        except (OSError, PathEscape):
            continue
        if holder is None:
            continue
        info, _ = live_ready(full)
        imex_pid = services.pid_from_file(root, f"{state_dir}/imex.pid")
        running = (info or {}).get("services")
        listed = [s.get("pid") for s in (running if isinstance(running, list) else [])
                  if isinstance(s, dict) and s.get("service") == "imex"]
        if imex_pid is None and listed and isinstance(listed[0], int):
            imex_pid = listed[0]
        if imex_pid is None:
            continue
        serves, sock = _run_owner(full, info)
        return RunFacts(holder, state_dir, imex_pid, info is not None, serves, by_slurm, sock)
    return None


def _run_owner(state_dir: str, info: dict[str, object] | None) -> tuple[str | None, str | None]:
    """What the run in ``state_dir`` (full path) serves IMEX as and the command socket it
    serves for ``dra-host`` (host path): its owner record
    (:data:`~nvfabric.rules.imex.tables.RUN_OWNER_FILE`, written before its daemon starts),
    else its ready file's ``imex_owner``; (None, None) when neither says."""
    record: object = None
    data = read_bytes(os.path.join(state_dir, RUN_OWNER_FILE), limit=1 << 12)
    if data is not None:
        try:
            record = strict.parse_json(data)
        except strict.BadValue:
            record = None
    if not isinstance(record, dict):
        record = {"owner": (info or {}).get("imex_owner")}
    serves, sock = record.get("owner"), record.get("socket")
    return (serves if serves in owner.OWNERS else None,
            sock if isinstance(sock, str) and hostpath.problem(sock) is None else None)


#: Seconds all resolver lookups of one node list check may take together.
RESOLVE_TIMEOUT_S = 3.0



# -- channels ---------------------------------------------------------------------------------


def read_channels(root: str) -> ChannelFacts:
    """Channel facts of the node under ``root``."""
    nodes = [stat_node(root, f"{CHANNEL_DIR}/{n}") for n in listdir(under(root, CHANNEL_DIR))]
    caps = [stat_node(root, f"{CAPS_DIR}/{n}") for n in listdir(under(root, CAPS_DIR))]
    params = read_text(under(root, PARAMS_PATH))
    return ChannelFacts(
        major=imex_major(root),
        nodes=tuple(n for n in nodes if n is not None),
        caps=tuple(n for n in caps if n is not None),
        params=parse_params(params) if params else {},
        driver_loaded=driver_version(root) is not None and "nvidia" in loaded_modules(root),
        root=root,
    )


# -- files ------------------------------------------------------------------------------------


#: The largest IMEX config or node list read (they are a few KiB; 1 MiB is thousands of nodes).
MAX_CONFIG_BYTES = 1 << 20


def not_regular(path: str) -> tuple[str, str] | None:
    """What stands at ``path`` (links not followed) when it is not a regular file:
    ``("missing", "")``, ``("link", target)`` (``"?"`` when the target cannot be read) or
    ``("other", "")``; None for a regular file."""
    try:
        st = os.lstat(path)
    except OSError:
        return "missing", ""
    if stat.S_ISLNK(st.st_mode):
        try:
            return "link", os.readlink(path)
        except OSError:
            return "link", "?"
    return None if stat.S_ISREG(st.st_mode) else ("other", "")


def shipped_problem(root: str, host_path: str) -> str | None:
    """Why the shipped config at ``host_path`` under ``root`` is not the vendor's file: a
    symbolic link (``is a symbolic link (to X)``: a link to ``/etc/passwd`` would be copied
    and printed, as for fabric manager's shipped file), or something that is not a regular
    file; None when it is a regular file or missing (a missing one is documented: the
    minimal config is used)."""
    kind = not_regular(under(root, host_path))
    if kind is None or kind[0] == "missing":
        return None
    if kind[0] == "link":
        return f"is a symbolic link (to {kind[1]!r}), not the vendor's file"
    return "is not a regular file"


def read_file(root: str, host_path: str) -> str | None:
    """Text of a config file under ``root`` (not stripped, bad UTF-8 replaced), None when
    missing, unreadable or not a regular file; ``input_unreadable`` naming it when larger than
    :data:`MAX_CONFIG_BYTES` (never cut). Read with
    :func:`nvfabric.facts.fs.read_bytes` (non-blocking open, regular files only), so a FIFO
    or device in place of config.cfg / nodes_config.cfg never makes a command wait."""
    data = read_bytes(under(root, host_path), limit=MAX_CONFIG_BYTES + 1)
    if data is not None and len(data) > MAX_CONFIG_BYTES:
        # never cut: a truncated config patched and written back would lose its tail
        raise usage_error(f"{under(root, host_path)}: larger than {MAX_CONFIG_BYTES >> 20} MiB, "
                          "the limit for an IMEX config or node list",
                          "give the config file itself (IMEX's are a few KiB)")
    return None if data is None else data.decode("utf-8", "replace")


# -- addresses and names -----------------------------------------------------------------------


def parse_fib_trie(text: str) -> tuple[str, ...]:
    """Local IPv4 addresses in /proc/net/fib_trie text: a ``|-- A.B.C.D`` leaf followed by a
    ``/32 host LOCAL`` line (Linux net/ipv4/fib_trie.c, fib_trie_seq_show)."""
    out: list[str] = []
    leaf: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|-- "):
            leaf = stripped[4:].strip()
        elif leaf and stripped.startswith("/32 host LOCAL"):
            if leaf not in out:
                out.append(leaf)
    return tuple(out)


def parse_if_inet6(text: str) -> tuple[str, ...]:
    """IPv6 addresses in /proc/net/if_inet6 text (32 hex digits first on each line)."""
    import ipaddress

    out = []
    for line in text.splitlines():
        parts = line.split()
        if parts and len(parts[0]) == 32:
            number = int_or_none(parts[0], base=16)
            if number is not None:
                out.append(str(ipaddress.IPv6Address(number)))
    return tuple(out)


def node_addresses(root: str) -> tuple[str, ...]:
    """The addresses of the node under ``root``: for a tree (not live,
    :func:`nvfabric.model.hostpath.is_live`), its proc/net/fib_trie and proc/net/if_inet6 when
    present; otherwise this host's interfaces (psutil)."""
    if not is_live(root):
        v4 = read_text(under(root, "/proc/net/fib_trie"))
        v6 = read_text(under(root, "/proc/net/if_inet6"))
        if v4 is not None or v6 is not None:
            return parse_fib_trie(v4 or "") + parse_if_inet6(v6 or "")
    return local_addresses()


def local_addresses() -> tuple[str, ...]:
    """Every IPv4/IPv6 address of this host's interfaces (psutil), scopes stripped."""
    import psutil

    out = set()
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                out.add(a.address.split("%", 1)[0])
    return tuple(sorted(out))


def parse_hosts(text: str) -> dict[str, tuple[str, ...]]:
    """/etc/hosts text (hosts(5): an address, then its names; ``#`` comments) as lower-case
    name -> addresses, in file order."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        for name in fields[1:]:
            out.setdefault(name.lower(), []).append(fields[0].split("%", 1)[0])
    return {k: tuple(v) for k, v in out.items()}


def resolve_names(root: str, names: Iterable[str],
                  timeout_s: float = RESOLVE_TIMEOUT_S) -> dict[str, tuple[str, ...]]:
    """Addresses of host names of a node list (lower-case name -> addresses): the node's
    etc/hosts under ``root``; for a live root (the node itself) also the resolver
    (getaddrinfo), all names together bounded by ``timeout_s`` (a resolver that hangs leaves
    the names it did not answer unresolved). Names without an answer are absent."""
    wanted = sorted({n.lower() for n in names if n})
    if not wanted:
        return {}
    hosts = parse_hosts(read_text(under(root, "/etc/hosts"), limit=1 << 20) or "")
    out = {n: hosts[n] for n in wanted if n in hosts}
    missing = [n for n in wanted if n not in out]
    if not missing or not is_live(root):
        return out
    import concurrent.futures

    def lookup(name: str) -> tuple[str, ...]:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
        return tuple(sorted({str(i[4][0]).split("%", 1)[0] for i in infos}))

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(missing)))
    try:
        futures = {pool.submit(lookup, n): n for n in missing}
        done, _ = concurrent.futures.wait(futures, timeout=timeout_s)
        for fut in done:
            try:
                out[futures[fut]] = fut.result()
            except OSError:  # socket.gaierror: unknown name
                continue
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return out


def local_names(root: str) -> tuple[str, ...]:
    """This node's host names: a tree's etc/hostname, a live root's gethostname() (no DNS
    lookup: it can hang)."""
    if not is_live(root):
        text = read_text(under(root, "/etc/hostname"))
        return (text,) if text else ()
    return (socket.gethostname(),)


# -- the host unit -----------------------------------------------------------------------------


#: Where a package ships the unit file (Debian 12 merged /usr keeps both spellings; the admin
#: copy in /etc overrides). Source: systemd.unit(5), "Unit File Load Path" (system mode).
UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")

def unit_file(root: str) -> str | None:
    """The host path of :data:`IMEX_UNIT`'s unit file under ``root``, or None (not installed)."""
    for d in UNIT_DIRS:
        if os.path.lexists(under(root, f"{d}/{IMEX_UNIT}")):
            return f"{d}/{IMEX_UNIT}"
    return None


def unit_state(root: str, live: bool) -> str:
    """``systemctl [--root ROOT] is-enabled UNIT``'s answer (``enabled``, ``disabled``,
    ``masked`` ...), or ``unknown`` when it gives none (systemctl missing, timed out after
    :data:`SYSTEMCTL_TIMEOUT_S`). ``live``: ask the running manager
    (:func:`nvfabric.effects.imex.systemd_running`), else edit-free ``--root`` mode."""
    argv = ["systemctl", "is-enabled", IMEX_UNIT] if live else \
        ["systemctl", "--root", hostpath.check(os.path.abspath(root), "--root"), "is-enabled",
         IMEX_UNIT]

    try:
        ran = program.run(argv, SYSTEMCTL_TIMEOUT_S, SYSTEMCTL_MAX_BYTES, SYSTEMCTL_MAX_BYTES)
    except OSError:
        return "unknown"
    if ran.rc is None:  # killed at a cap: no answer
        return "unknown"
    words = (ran.stdout + ran.stderr).decode("utf-8", "replace").split()
    return words[0] if words and words[0].replace("-", "").isalpha() else "unknown"


# -- the IMEX section of a node report ----------------------------------------------------------


def node_list(root: str, config_path: str = CONFIG_PATH) -> tuple[str, tuple[nodes.Peer, ...]]:
    """(path, entries) of the node list the IMEX config names (nodes_config.cfg); entries ()
    when the file is missing. Raises nodes.PeerError when an entry is malformed."""
    path = config.node_config_path(read_file(root, config_path), NODES_CONFIG_PATH)
    text = read_file(root, path)
    return path, nodes.parse_nodes_config(text) if text is not None else ()


def section(root: str, config_path: str = CONFIG_PATH,
            decision: owner.Ownership | None = None) -> dict[str, Any]:
    """The IMEX section of the node under ``root`` (:func:`nvfabric.rules.imex.report.section`
    of what is read here: owner evidence (unless ``decision`` is given, made from it already),
    channels, node list)."""
    if decision is None:
        decision = owner.decide(gather_evidence(root))
    facts = read_channels(root)
    try:
        listed: report.NodeList = node_list(root, config_path)
    except nodes.PeerError as err:
        listed = err
    return report.section(decision, facts, listed)
