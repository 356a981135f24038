"""Fake ``nvidia-imex-ctl``: ``-q`` (READY / NOT READY), ``-N`` (node table and connection
matrix) and ``-N -j`` (the same as JSON), from the fake daemon's ``imex.json``. Layouts from
tests/data/corpus/imex. Standard library only (copied into simulated trees).
"""

from __future__ import annotations

import json
import os
import time

from .daemon import init_stamp, say, short_path
from .state import faults, load, node_root, record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: The legend ``nvidia-imex-ctl -N`` prints first, as printed (its typo "triggreed" kept).
#: Capture: tests/data/corpus/imex/aws-pcluster-p6e-gb200-18node-imex-ctl-N-570.172.txt.
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
#: (tests/data/corpus/imex/dcgm-test-imex-ctl-N-j-*.json); INVALID is [fake wording].
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
    ``--u=PATH`` asks over the daemon's Unix command socket: fails when nobody listens there.
    Fault ``hang``: never answers. Each call is recorded (event ``call`` with its argv)."""
    root = node_root()
    record(root, "imex-ctl", "call", argv=argv)
    if faults(root, "imex-ctl").get("hang"):
        time.sleep(3600)
        return 1
    state = load(root, "imex.json", {"pid": None, "status": "DOWN", "nodes": {}})
    alive = bool(state.get("pid")) and _alive(int(state["pid"]))
    status = state.get("status", "DOWN") if alive else "DOWN"
    if not alive:
        state = {"nodes": {}}
    socket_path = next((a[4:] for a in argv if a.startswith("--u=")), None)
    if socket_path is not None and not _reachable(socket_path):
        say(f"[fake] failed to connect to the IMEX command socket {socket_path}")
        return 1
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


def _reachable(path: str) -> bool:
    """A daemon listens on the Unix command socket ``path`` (``--u=PATH``, the form the DRA
    driver's kubelet plugin uses)."""
    import socket

    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(2.0)
    try:
        with short_path(path) as name:
            conn.connect(name)
    except OSError:
        return False
    finally:
        conn.close()
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
