"""``nvidia-imex-ctl`` output: the local query (``-q``) and the domain status (``-N``, ``-N -j``).
Parsers, and the call itself (:func:`run_ctl`: argv only, always under a hard timeout, the
process group killed at the timeout and at exit).

- ``-q`` prints ``READY`` once the local daemon has its quorum and serves requests.
- ``-N -j``: ``{"nodes": {"<id>": {"status", "host", "connections": {"<id>": {"host",
  "status", "changed"}}, "version", "hostName"}}, "timestamp", "status": "UP|DEGRADED|DOWN"}``
  (captures tests/data/corpus/imex/dcgm-test-imex-ctl-N-j-degraded-580.30.json and
  dcgm-test-imex-ctl-N-j-up-oneline.json).
- ``-N``: a legend, a timestamp, ``Node #N - <address> - <STATUS> - Version: <v>`` lines, a
  From/To matrix of connection letters (C connected, I invalid/unreachable, N never connected,
  R recovering, D disconnected, A authenticating, !V! version mismatch, !M! node map mismatch)
  and ``Domain State: UP`` (capture tests/data/corpus/imex/
  aws-pcluster-p6e-gb200-18node-imex-ctl-N-570.172.txt).

Source of the flags: NVIDIA IMEX guide, "IMEX Service Command Service".
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nvfabric.effects import program
from nvfabric.facts.execinfo import exec_error
from nvfabric.model import strict
from nvfabric.model.errors import NvfabricError
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import PathEscape
from nvfabric.model.hostpath import check as check_path
from nvfabric.model.words import plural, seconds
from nvfabric.rules.imex.tables import CTL_TIMEOUT_S

if TYPE_CHECKING:
    from nvfabric.effects.program import Limit

STATES = ("UP", "DEGRADED", "DOWN")
READY = "READY"
#: Matrix letters meaning "no working connection" (legend of the -N output).
BAD_LINKS = {"I", "N", "R", "D", "!V!", "!M!"}
LINK_WORDS = {
    "C": "connected", "I": "invalid (not reachable)", "N": "never connected",
    "R": "recovering", "D": "disconnected", "A": "authenticating",
    "!V!": "version mismatch", "!M!": "node map mismatch",
}

_NODE_LINE = re.compile(r"^\s*Node\s+#(\d{1,9})\s+-\s+(.*)$", re.ASCII)
_STATE_LINE = re.compile(r"^\s*Domain State:\s*(\S+)")
_MATRIX_ROW = re.compile(r"^\s*(\d{1,9})\s+((?:(?:C|I|N|R|D|A|!V!|!M!)\s*)+)$", re.ASCII)


@dataclass(frozen=True)
class CtlNode:
    """One node of the domain as the daemon reports it. ``host`` is the node list entry."""

    node_id: int
    host: str
    status: str
    version: str | None = None
    hostname: str | None = None

    def label(self) -> str:
        name = f" ({self.hostname})" if self.hostname else ""
        return f"{self.host or '?'}{name} (node {self.node_id})"


@dataclass(frozen=True)
class DomainStatus:
    """The domain as one daemon sees it. ``state`` UP, DEGRADED, DOWN (or what it printed);
    ``unreachable`` labels of nodes that are not READY or that no one reaches; ``bad_links``
    ``from -> to: meaning`` lines; ``source`` ``json`` or ``text``."""

    state: str
    nodes: tuple[CtlNode, ...]
    unreachable: tuple[str, ...] = ()
    bad_links: tuple[str, ...] = ()
    timestamp: str | None = None
    source: str = "json"

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "timestamp": self.timestamp,
            "nodes": [
                {"id": n.node_id, "host": n.host, "status": n.status, "version": n.version,
                 "hostname": n.hostname}
                for n in self.nodes
            ],
            "unreachable": list(self.unreachable),
            "bad_links": list(self.bad_links),
        }

    def finding(self) -> Finding | None:
        """``imex_domain_degraded`` (error) unless the domain is UP with at least one node
        and no unreachable one (UP over 0 nodes, or with unreachable ones, is not healthy)."""
        if self.state == "UP" and self.nodes and not self.unreachable:
            return None
        if self.unreachable:
            why = "unreachable " + ", ".join(self.unreachable)
        elif not self.nodes:
            why = "nvidia-imex-ctl lists no node (is the daemon running with a node list?)"
        elif self.bad_links:
            why = (f"{plural(len(self.bad_links), 'link')} down, e.g. {self.bad_links[0]}; "
                   "every node reports READY")
        else:
            why = "every node reports READY and nvidia-imex-ctl names no unreachable node"
        return Finding(
            "imex_domain_degraded", "error",
            f"IMEX domain is {self.state}: {why}",
            "on each unreachable node: is nvidia-imex running (nvfabric imex domain there), "
            "is its address in the same node list, does the IMEX port (SERVER_PORT, 50000) "
            "pass between the nodes",
            {"state": self.state, "unreachable": list(self.unreachable),
             "bad_links": list(self.bad_links[:20])},
        )


def domain_argv(ctl: str, config: str, as_json: bool = True) -> tuple[str, ...]:
    """``nvidia-imex-ctl -c <config> -N [-j]``: the whole domain's status."""
    out = (check_path(ctl, "nvidia-imex-ctl"), "-c", check_path(config, "IMEX config"), "-N")
    return out + ("-j",) if as_json else out


def parse_query(text: str) -> bool:
    """True when ``nvidia-imex-ctl -q`` output says READY (a line that is exactly READY)."""
    return any(line.strip() == READY for line in text.splitlines())


def parse_domain(text: str) -> DomainStatus:
    """``-N -j`` JSON or ``-N`` text, told apart by the first character; ValueError when it is
    neither."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return parse_json(stripped)
    return parse_text(text)


def parse_json(text: str) -> DomainStatus:
    """``nvidia-imex-ctl -N -j``; ValueError on malformed JSON, a missing status, or a value of
    the wrong type anywhere (the message names its path, ``nodes.0.connections``). Numbers
    and nesting are bounded (:func:`nvfabric.model.strict.parse_json`)."""
    try:
        return _parse_json(text)
    except strict.BadValue as err:
        raise ValueError(f"nvidia-imex-ctl JSON: {err}") from None


def _parse_json(text: str) -> DomainStatus:
    data = strict.obj(strict.parse_json(text), "document")
    if not isinstance(data.get("status"), str):
        raise ValueError("nvidia-imex-ctl JSON has no top-level \"status\"")
    raw_nodes = strict.obj(data.get("nodes") or {}, "nodes")
    nodes: list[CtlNode] = []
    referenced: dict[int, str] = {}
    bad: list[str] = []
    for key, value in raw_nodes.items():
        where = f"nodes.{key}"
        raw = strict.obj(value, where)
        node_id = strict.to_int(key, what=f"node key {where}", max_digits=9)
        node = CtlNode(node_id, _field(raw, "host", where), _field(raw, "status", where),
                       _opt(_field(raw, "version", where)), _opt(_field(raw, "hostName", where)))
        nodes.append(node)
        conns = strict.obj(raw.get("connections") or {}, f"{where}.connections")
        for peer_key, value2 in conns.items():
            cwhere = f"{where}.connections.{peer_key}"
            conn = strict.obj(value2, cwhere)
            peer = strict.to_int(peer_key, what=f"peer key {cwhere}", max_digits=9)
            referenced.setdefault(peer, _field(conn, "host", cwhere))
            status = _field(conn, "status", cwhere)
            # A node's entry for itself is no link (the table's diagonal, see parse_text).
            if status != "CONNECTED" and peer != node.node_id:
                bad.append(f"node {node.node_id} -> node {peer_key}: {status.lower() or '?'}")
    nodes.sort(key=lambda n: n.node_id)
    known = {n.node_id for n in nodes}
    unreachable = [n.label() for n in nodes if n.status != READY]
    unreachable += [
        f"{host or '?'} (node {nid}, no status reported)"
        for nid, host in sorted(referenced.items()) if nid not in known
    ]
    return DomainStatus(_state(data["status"]), tuple(nodes), tuple(unreachable), tuple(bad),
                        _opt(data.get("timestamp")), "json")


def _state(text: str) -> str:
    """The domain status as printed (``UP``, ``DEGRADED``, ``DOWN``: :data:`STATES`, any
    case); ValueError for any other: an unknown status is not judged healthy or not."""
    state = text.strip().upper()
    if state not in STATES:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise ValueError(f"unknown IMEX domain status {shown!r} (nvidia-imex-ctl prints "
                         + ", ".join(STATES) + ")")
    return state


def _field(raw: dict[str, Any], key: str, where: str) -> str:
    """A string field of a node or connection (absent/null: ""); a number is taken as
    printed (versions); BadValue naming the path for an object, array or boolean."""
    value = raw.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return strict.text(value, f"{where}.{key}", optional=True)


def _opt(value: object) -> str | None:
    return str(value) if value not in (None, "") else None


def parse_text(text: str) -> DomainStatus:
    """``nvidia-imex-ctl -N`` text; ValueError when it has no ``Domain State:`` line."""
    state: str | None = None
    nodes: list[CtlNode] = []
    matrix: dict[int, list[str]] = {}
    timestamp = None
    for line in text.splitlines():
        m = _NODE_LINE.match(line)
        if m:
            nodes.append(_text_node(strict.to_int(m.group(1)), m.group(2)))
            continue
        m = _STATE_LINE.match(line)
        if m:
            state = _state(m.group(1))
            continue
        m = _MATRIX_ROW.match(line)
        if m:
            matrix[strict.to_int(m.group(1))] = m.group(2).split()
            continue
        if timestamp is None and re.match(r"^\d{1,2}/\d{1,2}/\d{4} \d", line.strip(), re.ASCII):
            timestamp = line.strip()
    if state is None:
        raise ValueError("nvidia-imex-ctl output has no 'Domain State:' line")
    by_id = {n.node_id: n for n in nodes}
    unreachable = [n.label() for n in nodes if n.status != READY]
    bad: list[str] = []
    cut_off: set[int] = set()
    for src, cells in sorted(matrix.items()):
        for dst, cell in enumerate(cells):
            if cell in BAD_LINKS and src != dst:
                bad.append(f"node {src} -> node {dst}: {LINK_WORDS[cell]}")
                if by_id.get(src) is not None and by_id[src].status == READY:
                    cut_off.add(dst)
    for dst in sorted(cut_off):
        node = by_id.get(dst)
        if node is not None and node.status == READY:
            unreachable.append(f"{node.label()}, not reached by every peer")
        elif node is None:
            unreachable.append(f"node {dst}, not reached by every peer")
    return DomainStatus(state, tuple(nodes), tuple(unreachable), tuple(bad), timestamp, "text")


def _text_node(node_id: int, rest: str) -> CtlNode:
    """``198.51.100.1    - READY                - Version: 570.172`` (``-H`` adds a name)."""
    parts = [p.strip() for p in rest.split(" - ")]
    host = parts[0] if parts else ""
    hostname = None
    m = re.match(r"^(\S+)\s+\((.+)\)$", host)
    if m:
        host, hostname = m.group(1), m.group(2)
    status = parts[1] if len(parts) > 1 else ""
    version = None
    for p in parts[2:]:
        if p.startswith("Version:"):
            version = p.split(":", 1)[1].strip() or None
    return CtlNode(node_id, host, status, version, hostname)


# -- nvidia-imex-ctl --------------------------------------------------------------------------


@dataclass(frozen=True)
class CtlResult:
    """One ctl call: ``rc`` None when it was killed at a cap (``limit``: its time, or its output
    over :data:`CTL_MAX_BYTES`), then with its process group."""

    argv: tuple[str, ...]
    rc: int | None
    stdout: str
    stderr: str
    limit: Limit | None = None

    @property
    def timed_out(self) -> bool:
        return self.rc is None and (self.limit is None or self.limit.what == "time")


#: The most of a ctl call's output read: the limit of a saved ``-N -j`` (``imex domain
#: --from-file``, docs/readers.md "Sizes"); a ctl printing more is killed at it.
CTL_MAX_BYTES = 16 << 20

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
    """Run ``nvidia-imex-ctl`` through the probe door (:func:`nvfabric.effects.program.run`:
    argv only, a hard timeout: it is known to hang; its output at most
    :data:`CTL_MAX_BYTES`; its whole process group SIGKILLed at either cap, and at exit when
    still in flight, :func:`_kill_live_ctl`). Raises OSError when it cannot be executed,
    PathEscape when it is a link out of the root, Stopped."""
    pids: list[int] = []

    def started(pid: int) -> None:
        # registered as soon as it runs; an exit before that finds its PR_SET_PDEATHSIG
        # doing the same (the door sets it)
        with _LIVE_LOCK:
            _LIVE_CTL.add(pid)
            pids.append(pid)

    try:
        ran = program.run(argv, timeout_s, CTL_MAX_BYTES, on_start=started)
    finally:
        with _LIVE_LOCK:
            _LIVE_CTL.difference_update(pids)
    return CtlResult(tuple(argv), ran.rc, ran.stdout.decode("utf-8", "replace"),
                     ran.stderr.decode("utf-8", "replace"), ran.limit)


def query_domain(binary: str, cfg: str, timeout_s: float) -> DomainStatus:
    """Ask the daemon through ``binary`` (nvidia-imex-ctl, already under the root) with config
    ``cfg``: ``-N -j``, then ``-N`` for a ctl without JSON, each under a hard timeout of
    ``timeout_s`` seconds. NvfabricError ``binary_missing`` (cannot run),
    ``imex_ctl_timeout`` (killed at the timeout) or ``imex_not_ready`` (no parsable answer)."""
    last: CtlResult | None = None
    for as_json in (True, False):
        argv = domain_argv(binary, cfg, as_json)
        try:
            result = run_ctl(argv, timeout_s)
        except (OSError, PathEscape) as err:
            why = exec_error(binary, err) if isinstance(err, OSError) else str(err)
            raise NvfabricError(Finding(
                "binary_missing", "error", f"cannot run {binary}: {why}",
                "install the nvidia-imex package (it ships nvidia-imex-ctl), or give --ctl",
                {"service": "imex"})) from None
        if result.rc is None and not result.timed_out:
            assert result.limit is not None
            raise NvfabricError(Finding(
                "probe_limit", "error",
                f"{' '.join(argv)} {result.limit.words()} (killed)",
                "nvidia-imex-ctl prints a few KiB for a whole domain: check that --ctl names "
                "the vendor's nvidia-imex-ctl",
                {"program": binary, "argv": list(argv), "limit": result.limit.what,
                 "limit_value": result.limit.value}))
        if result.timed_out:
            raise NvfabricError(Finding(
                "imex_ctl_timeout", "error",
                f"{' '.join(argv)} did not answer within {seconds(timeout_s)} s (killed)",
                "is nvidia-imex running with IMEX_CMD_ENABLED=1 and this config? "
                "(nvidia-imex-ctl hangs when the daemon does not answer)",
                {"argv": list(argv), "timeout_s": timeout_s}))
        last = result
        if result.rc == 0:
            try:
                return parse_domain(result.stdout)
            except ValueError:
                continue
    assert last is not None
    raise NvfabricError(Finding(
        "imex_not_ready", "error",
        f"nvidia-imex-ctl exited with code {last.rc}: "
        + ((last.stderr or last.stdout).strip().splitlines() or ["no output"])[-1],
        "is nvidia-imex running (nvfabric run, or its unit) with the command service on?",
        {"argv": list(last.argv), "exit_code": last.rc}))


def domain_state(binary: str, cfg: str, timeout_s: float = 5.0) -> str | None:
    """The IMEX domain state (``UP``, ``DEGRADED``, ``DOWN``) as ``nvidia-imex-ctl -N -j``
    prints it (full paths of the binary and the config the daemon runs with), None when it
    cannot be asked (not running, not installed, timed out after ``timeout_s``): a metric's
    reading, where a missing answer is no series."""
    try:
        result = run_ctl(domain_argv(binary, cfg), timeout_s)
        return parse_domain(result.stdout).state if result.rc == 0 else None
    except (OSError, ValueError):
        return None
