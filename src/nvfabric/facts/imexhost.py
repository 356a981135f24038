"""Host access for IMEX: the only module of nvfabric that reads or changes the node for IMEX.

Reads (all under a root directory, default ``/``): systemd wants/ links of the host unit,
the DRA driver's kubelet plugin state, slurm.conf and its prolog/epilog scripts, the channel
nodes and /proc/driver/nvidia/params. Changes: channel nodes (``mknod``, mode 0666), config
files (atomic writes through :func:`nvfabric.effects.atomic.write_atomic`) and the host unit's
enablement (``systemctl``, argv only, ``--root`` for an image root). Runs
``nvidia-imex-ctl`` with a hard timeout (argv only). Reads interface addresses with psutil.
"""

from __future__ import annotations

import atexit
import glob
import os
import signal
import socket
import stat
import subprocess
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from nvfabric.effects.atomic import staged, write_atomic
from nvfabric.facts.fs import listdir, read_bytes, read_text, under
from nvfabric.facts.nvidia import driver_version, imex_major, loaded_modules
from nvfabric.model import hostpath
from nvfabric.model.errors import InputError, usage_error
from nvfabric.model.words import plural
from nvfabric.rules.imex.channels import ChannelFacts, DevNode, channel_path, parse_params
from nvfabric.rules.imex.owner import OwnerEvidence
from nvfabric.rules.imex.tables import (
    CAPS_DIR,
    CHANNEL_DIR,
    CHANNEL_MODE,
    CTL_TIMEOUT_S,
    DRA_PLUGIN_DIRS,
    HOST_UNIT,
    PARAMS_PATH,
    SLURM_CONF_PATHS,
    SLURM_PROLOG_MARKERS,
    SLURM_SWITCH_IMEX,
    SYSTEMD_DIRS,
)
from nvfabric.strict import int_or_none


def gather_evidence(root: str) -> OwnerEvidence:
    """Owner evidence of the node under ``root`` (host paths in the lines)."""
    return OwnerEvidence(
        dra=_dra_evidence(root),
        unit_enabled=_unit_wants(root),
        unit_masked=_unit_masked(root),
        slurm=_slurm_evidence(root),
    )


def _dra_evidence(root: str) -> tuple[str, ...]:
    out = []
    for d in DRA_PLUGIN_DIRS:
        path = under(root, d)
        if not os.path.isdir(path):
            continue
        parts = []
        if os.path.isfile(os.path.join(path, "checkpoint.json")):
            parts.append("checkpoint.json")
        domains = listdir(os.path.join(path, "domains"))
        if domains:
            parts.append(plural(len(domains), "ComputeDomain"))
        out.append(f"kubelet plugin state {d}" + (f" ({', '.join(parts)})" if parts else ""))
    return tuple(out)


def _unit_wants(root: str) -> tuple[str, ...]:
    out = []
    for d in SYSTEMD_DIRS:
        for wants in listdir(under(root, d)):
            if not wants.endswith((".wants", ".requires")):
                continue
            link = f"{d}/{wants}/{HOST_UNIT}"
            if os.path.lexists(under(root, link)):
                out.append(link)
    return tuple(out)


def _unit_masked(root: str) -> str | None:
    for d in SYSTEMD_DIRS:
        link = f"{d}/{HOST_UNIT}"
        path = under(root, link)
        try:
            target = os.readlink(path)
        except OSError:
            continue
        if target == "/dev/null":
            return f"{link} -> /dev/null"
    return None


def _slurm_evidence(root: str) -> tuple[str, ...]:
    out: list[str] = []
    for conf in SLURM_CONF_PATHS:
        text = read_text(under(root, conf), limit=1 << 20)
        if text is None:
            continue
        for key, value in _slurm_items(text):
            low = key.lower()
            if low == "switchtype" and value.strip() == SLURM_SWITCH_IMEX:
                out.append(f"{conf}: {key}={value.strip()}")
            elif low in ("prolog", "epilog"):
                for script in _scripts(root, value):
                    body = read_text(under(root, script), limit=1 << 20) or ""
                    marks = [m for m in SLURM_PROLOG_MARKERS if m in body]
                    if marks:
                        out.append(f"{conf}: {key}={value} -> {script} mentions {marks[0]}")
    return tuple(out)


def _slurm_items(text: str) -> list[tuple[str, str]]:
    """``Key=Value`` pairs of slurm.conf (case-insensitive keys, ``#`` comments)."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out.append((key.strip(), value.strip()))
    return out


def _scripts(root: str, value: str) -> list[str]:
    """Host paths of a Prolog/Epilog value: comma-separated paths, each may be a glob."""
    out = []
    for item in value.split(","):
        item = item.strip()
        if hostpath.problem(item) is not None:
            continue  # not an absolute, plain path (relative, NUL, control characters)
        matches = sorted(glob.glob(under(root, item)))
        rootlen = len(os.path.abspath(root).rstrip("/"))
        out += [m[rootlen:] if root != "/" else m for m in matches if os.path.isfile(m)]
    return out


#: Seconds all resolver lookups of one node list check may take together.
RESOLVE_TIMEOUT_S = 3.0


# -- channels ---------------------------------------------------------------------------------


def stat_node(root: str, host_path: str) -> DevNode | None:
    """The node at ``host_path`` (not following links), None when absent."""
    try:
        st = os.lstat(under(root, host_path))
    except OSError:
        return None
    mode = st.st_mode
    if stat.S_ISCHR(mode):
        kind = "char"
    elif stat.S_ISBLK(mode):
        kind = "block"
    elif stat.S_ISREG(mode):
        kind = "file"
    elif stat.S_ISDIR(mode):
        kind = "dir"
    else:
        kind = "other"
    dev = kind in ("char", "block")
    return DevNode(
        host_path, kind,
        os.major(st.st_rdev) if dev else None, os.minor(st.st_rdev) if dev else None,
        stat.S_IMODE(mode), st.st_uid, st.st_gid,
    )


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
    )


def channel_target(root: str, number: int) -> str:
    """Where ``channel<number>`` is made: its host path under ``root`` through
    :func:`confined` (a ``dev/nvidia-caps-imex-channels`` that is a link out of the root is
    PathEscape, so no world-writable device is ever made outside it)."""
    return confined(root, channel_path(number), "IMEX channel")


def create_channel(root: str, number: int, major: int) -> DevNode:
    """Make ``channel<number>`` (c major:number, mode 0666, as NVIDIA documents) atomically:
    mknod a temporary node beside it, chmod (the umask applies to mknod), rename over whatever
    was there (:func:`nvfabric.effects.atomic.staged`). The directory is created mode 0755.
    Raises PathEscape when the path leads out of ``root`` (:func:`channel_target`, checked
    again just before mknod), OSError (EPERM without CAP_MKNOD)."""
    host_path = channel_path(number)
    target = channel_target(root, number)
    with staged(target, mode=CHANNEL_MODE, dir_mode=0o755) as tmp:
        channel_target(root, number)  # the directory may have been made just now: still inside
        os.mknod(tmp, stat.S_IFCHR | CHANNEL_MODE, os.makedev(major, number))
    node = stat_node(root, host_path)
    assert node is not None
    return node


# -- files and interfaces ---------------------------------------------------------------------


class PathEscape(InputError):
    """A host path that would leave the root: a ``..`` segment, or a link on the way that
    points outside it."""


def confined(root: str, host_path: str, what: str = "path") -> str:
    """``host_path`` resolved under ``root`` (:func:`nvfabric.model.hostpath.confined`: absolute, no
    ``..``, newline or NUL, links followed and staying under ``root``); PathEscape otherwise.
    Every file that ``nvfabric imex config`` writes goes through here first."""
    try:
        return hostpath.confined(root, host_path, what)
    except ValueError as err:
        raise PathEscape(str(err)) from None


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


def write_file(root: str, host_path: str, content: str, mode: int = 0o644) -> None:
    """Atomic replace of a config file under ``root`` (a backup of different old content is
    kept as ``.nvfabric.bak``). Raises OSError; PathEscape for a path that would leave the
    root (:func:`confined`)."""
    write_atomic(confined(root, host_path), content, mode=mode)


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
    """The addresses of the node under ``root``: for a simulated root, its proc/net/fib_trie
    and proc/net/if_inet6 when present; otherwise this host's interfaces (psutil)."""
    if os.path.abspath(root) != "/":
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
    etc/hosts under ``root``; on the host itself (root ``/``) also the resolver
    (getaddrinfo), all names together bounded by ``timeout_s`` (a resolver that hangs leaves
    the names it did not answer unresolved). Names without an answer are absent."""
    wanted = sorted({n.lower() for n in names if n})
    if not wanted:
        return {}
    hosts = parse_hosts(read_text(under(root, "/etc/hosts"), limit=1 << 20) or "")
    out = {n: hosts[n] for n in wanted if n in hosts}
    missing = [n for n in wanted if n not in out]
    if os.path.abspath(root) != "/" or not missing:
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
    """This node's host names: etc/hostname under a simulated root, else gethostname()
    (no DNS lookup: it can hang)."""
    if os.path.abspath(root) != "/":
        text = read_text(under(root, "/etc/hostname"))
        return (text,) if text else ()
    return (socket.gethostname(),)


# -- nvidia-imex-ctl --------------------------------------------------------------------------


@dataclass(frozen=True)
class CtlResult:
    """One ctl call: ``rc`` None when it timed out (then killed with its process group)."""

    argv: tuple[str, ...]
    rc: int | None
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return self.rc is None


#: Process groups of the ctl calls in flight (a readiness probe runs them in a worker thread).
_LIVE_CTL: set[int] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _kill_live_ctl() -> None:
    """At exit, SIGKILL the group of every ctl call still in flight: a probe thread that is
    abandoned when ``nvfabric run`` stops (its join is bounded) would otherwise leave a hung
    ``nvidia-imex-ctl`` behind, in its own session, for good."""
    with _LIVE_LOCK:
        groups = list(_LIVE_CTL)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def run_ctl(argv: tuple[str, ...], timeout_s: float = CTL_TIMEOUT_S) -> CtlResult:
    """Run ``nvidia-imex-ctl`` (argv only) with a hard timeout: it is known to hang. On
    timeout its whole process group gets SIGKILL, and so does a call still in flight when
    nvfabric exits (:func:`_kill_live_ctl`). Raises OSError when it cannot be executed."""
    proc = subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )
    with _LIVE_LOCK:
        _LIVE_CTL.add(proc.pid)
    try:
        return _communicate(proc, argv, timeout_s)
    finally:
        with _LIVE_LOCK:
            _LIVE_CTL.discard(proc.pid)


def _communicate(proc: subprocess.Popen[bytes], argv: tuple[str, ...],
                 timeout_s: float) -> CtlResult:
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            out, err = proc.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            out, err = b"", b""
        return CtlResult(argv, None, out.decode("utf-8", "replace"),
                         err.decode("utf-8", "replace"))
    return CtlResult(argv, proc.returncode, out.decode("utf-8", "replace"),
                     err.decode("utf-8", "replace"))


#: Where a package ships the unit file (Debian 12 merged /usr keeps both spellings; the admin
#: copy in /etc overrides). Source: systemd.unit(5), "Unit File Load Path" (system mode).
UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")

#: Bound for each systemctl call (it only edits links offline; a live manager answers fast).
SYSTEMCTL_TIMEOUT_S = 60.0


def systemd_running(root: str) -> bool:
    """A live host whose systemd manager is running (sd_booted(3): ``/run/systemd/system``
    exists) and is the node itself: ``root`` is ``/``. An image root, a chroot or a container
    build never is."""
    return os.path.abspath(root) == "/" and os.path.isdir("/run/systemd/system")


def unit_file(root: str) -> str | None:
    """The host path of :data:`HOST_UNIT`'s unit file under ``root``, or None (not installed)."""
    for d in UNIT_DIRS:
        if os.path.lexists(under(root, f"{d}/{HOST_UNIT}")):
            return f"{d}/{HOST_UNIT}"
    return None


def unit_argv(root: str, action: str, now: bool, live: bool) -> list[str]:
    """The systemctl argv that applies ``action`` (``enable`` | ``disable``) to
    :data:`HOST_UNIT`: ``systemctl --root ROOT ACTION UNIT`` for an image root (systemctl(1)
    ``--root``: edits the unit links of that tree, no manager involved), ``systemctl ACTION
    [--now] UNIT`` on a live host. ValueError for another action or a root that is not a plain
    absolute path."""
    if action not in ("enable", "disable"):
        raise ValueError(f"unknown unit action {action!r}")
    if live:
        return ["systemctl", action, *(["--now"] if now else []), HOST_UNIT]
    hostpath.check(os.path.abspath(root), "--root")
    return ["systemctl", "--root", os.path.abspath(root), action, HOST_UNIT]


def run_systemctl(argv: list[str]) -> tuple[int, str]:
    """Run one systemctl argv (no shell), bounded by :data:`SYSTEMCTL_TIMEOUT_S`: (exit status,
    its stdout and stderr together, stripped). OSError when systemctl cannot be run; a timeout
    is exit status 124."""
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=SYSTEMCTL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {SYSTEMCTL_TIMEOUT_S:g} s"
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def unit_state(root: str, live: bool) -> str:
    """``systemctl [--root ROOT] is-enabled UNIT``'s answer (``enabled``, ``disabled``,
    ``masked`` ...), or ``unknown`` when it gives none."""
    argv = ["systemctl", "is-enabled", HOST_UNIT] if live else \
        ["systemctl", "--root", hostpath.check(os.path.abspath(root), "--root"), "is-enabled",
         HOST_UNIT]
    try:
        _, out = run_systemctl(argv)
    except OSError:
        return "unknown"
    words = out.split()
    return words[0] if words and words[0].replace("-", "").isalpha() else "unknown"
