"""The liveness of one fabric service (NVLSM, fabric manager, IMEX) as the readers find it:
a value made by :func:`nvfabric.facts.services.read` (or from a bug report's ``systemctl
status``, :mod:`nvfabric.triage.build`) and judged by :func:`nvfabric.rules.verdict.verdict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nvfabric.model.vocab import Service


@dataclass(frozen=True)
class ServiceState:
    """Liveness of one fabric service, as read from the host (facts.services).

    ``age_s``: seconds since the process started (None unknown); ``socket``: NVLSM's IPC socket
    exists; ``port``: fabric manager's command port is listening (None: not checked).
    """

    name: Service
    running: bool
    age_s: float | None = None
    pid: int | None = None
    socket: bool | None = None
    port: bool | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "running": self.running, "pid": self.pid,
            "age_s": None if self.age_s is None else round(self.age_s, 1),
            "socket": self.socket, "port": self.port, "detail": self.detail,
        }
