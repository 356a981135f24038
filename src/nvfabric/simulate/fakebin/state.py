"""The simulated node's state as the fakes share it: the node root, the files under
``DIR/var/lib/nvfabric-sim/`` (node.json, gpus.json, faults.json, calls.jsonl; see
:mod:`nvfabric.simulate.fakebin`; their JSON through :mod:`json`) and the few host
files the fakes read (driver version, IB port GUIDs). Standard library only (copied into
simulated trees).
"""

from __future__ import annotations

import json
import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: Where the fakes keep their state, relative to the node root.
STATE_DIR = "var/lib/nvfabric-sim"
#: NVLSM's IPC socket (fabric manager's FM_SM_IPC_INTERFACE default): where the fake NVLSM
#: serves it and the fake fabric manager connects.
NVLSM_SOCKET = "/var/run/nvidia-fabricmanager/fm_sm_ipc.socket"


#: The simulated root when the launcher gave it (the single-file binary: its launchers are
#: ``#!/path/to/nvfabric --nvfabric-sim-fake`` scripts, see :mod:`nvfabric.effects.frozen`); None
#: for the Python launchers, whose root is found from this package's copy in ``DIR/bin``.
ROOT: str | None = None


def node_root() -> str:
    """The simulated root: :data:`ROOT` when set, else the parent of ``DIR/bin``, the directory
    holding this package (``DIR/bin/_nvfabric_fakes/``)."""
    if ROOT is not None:
        return ROOT
    package = os.path.dirname(os.path.realpath(__file__))
    return os.path.dirname(os.path.dirname(package))


def host(root: str, path: str) -> str:
    """A built-in host path (``/var/run/...``) under the simulated root."""
    return os.path.join(root, path.lstrip("/"))


def state_path(root: str, name: str) -> str:
    return os.path.join(root, STATE_DIR, name)


def load(root: str, name: str, default: Any) -> Any:
    try:
        with open(state_path(root, name), encoding="utf-8") as fh:
            return json.loads(fh.read())
    except (OSError, ValueError):
        return default


def save(root: str, name: str, data: Any) -> None:
    """Atomic JSON write (temp file + rename), so a reader never sees half a file."""
    path = state_path(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(data, indent=1))
    os.replace(tmp, path)


def faults(root: str, prog: str) -> dict[str, Any]:
    """The faults injected for ``prog``: the fault file, then ``$NVFABRIC_FAKE_FAULTS``."""
    out: dict[str, Any] = dict(load(root, "faults.json", {}).get(prog, {}))
    env = os.environ.get("NVFABRIC_FAKE_FAULTS")
    if env:
        try:
            out.update(json.loads(env).get(prog, {}))
        except (ValueError, AttributeError):
            pass
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
        try:
            with open(os.path.join(root, rel), encoding="utf-8") as fh:
                return fh.read().strip() or None
        except OSError:
            pass
    return None


def port_guids(root: str) -> list[str]:
    """Port GUIDs of the simulated IB ports (last 64 bits of ``gids/0``)."""
    out = []
    base = os.path.join(root, "sys/class/infiniband")
    for dev in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        ports = os.path.join(base, dev, "ports")
        for port in sorted(os.listdir(ports)) if os.path.isdir(ports) else []:
            try:
                with open(os.path.join(ports, port, "gids/0"), encoding="utf-8") as fh:
                    digits = fh.read().strip().replace(":", "")
            except OSError:
                continue
            out.append("0x" + digits[16:].lower())
    return out
