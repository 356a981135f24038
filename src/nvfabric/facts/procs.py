"""The processes of a root's process table, by name: pid, argument list and environment, read
from ``proc/<pid>/comm``, ``cmdline`` and ``environ`` under the root (proc(5)). Bounded: at
most :data:`MAX_PROCESSES` matches, :data:`MAX_ARGS_BYTES` of each file. A simulated tree
holds a process the same way (``proc/4242/comm``, ``cmdline``, ``environ``); a tree without
numeric ``proc`` entries has no processes here. Reads only; a process that ends while it is
read is skipped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from nvfabric.facts.fs import listdir, read_bytes, read_text
from nvfabric.model.hostpath import under
from nvfabric.model.strict import is_uint, to_int

#: The most processes of one name returned, and the most bytes read of a cmdline or environ.
MAX_PROCESSES = 16
MAX_ARGS_BYTES = 1 << 16


@dataclass(frozen=True)
class Process:
    """One process: ``pid``, ``argv`` (its cmdline split at NUL), ``env`` (its environ as
    name -> value; empty when unreadable, e.g. another user's without privileges)."""

    pid: int
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


def by_name(root: str, comms: tuple[str, ...]) -> tuple[Process, ...]:
    """The processes of ``root``'s process table whose ``comm`` (the kernel's name, cut to 15
    characters) is one of ``comms``, by pid."""
    proc = under(root, "/proc")
    out: list[Process] = []
    for entry in sorted((e for e in listdir(proc) if is_uint(e)), key=int):
        if read_text(os.path.join(proc, entry, "comm")) not in comms:
            continue
        argv = _split(read_bytes(os.path.join(proc, entry, "cmdline"), MAX_ARGS_BYTES))
        env: dict[str, str] = {}
        for item in _split(read_bytes(os.path.join(proc, entry, "environ"), MAX_ARGS_BYTES)):
            name, sep, value = item.partition("=")
            if sep and name:
                env[name] = value
        out.append(Process(to_int(entry), argv, env))
        if len(out) >= MAX_PROCESSES:
            break
    return tuple(out)


def _split(data: bytes | None) -> tuple[str, ...]:
    if not data:
        return ()
    return tuple(p.decode("utf-8", "replace") for p in data.split(b"\0") if p)
