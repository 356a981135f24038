"""The values a unit is run with: its :class:`Policy` (restarts, back-off, start limit, R04
reset command, timeouts), what a readiness probe answers (:class:`GpuCheck`) and what a live
diagnosis offers (:class:`Classifier`). Pure values; no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from nvfabric.model.findings import Finding

#: Seconds after the first stop signal within which another one is the same request, not an
#: operator's "kill now". One stop reaches nvfabric twice within milliseconds where it runs as
#: the child of the single-file binary's PyInstaller bootloader, which forwards every signal it
#: gets to its child, and the sender signals both: Talos stops an extension service with
#: SIGTERM to every process of the container (siderolabs/talos
#: internal/app/machined/pkg/system/runner/containerd/containerd.go, ``task.Kill(SIGTERM,
#: containerd.WithKillAll)``), and a terminal's Ctrl-C goes to the whole foreground group.
REPEATED_STOP_WINDOW_S = 1.0



class Classifier(Protocol):
    """What :class:`nvfabric.rules.diagnose.Classifier` offers: new findings per line, all
    so far."""

    def feed(self, line: str) -> list[Finding]: ...

    def findings(self) -> list[Finding]: ...


@dataclass(frozen=True)
class Policy:
    """How the unit is run. Times in seconds.

    ``restart``: ``never`` or ``on-failure``; backoff ``backoff_base_s * 2**n`` capped at
    ``backoff_cap_s`` (n resets once the unit stayed ready for ``backoff_cap_s``).
    ``gpu_reset_argv``: the operator's GPU reset command (argv), the opt-in of R04.
    ``registered_at_start``: GPUs were already registered before the first start (a fabric
    manager ran before), so the first start is a restart for R04. ``gpu_reset_timeout_s``:
    the reset command's bound (then its process group is killed and nothing starts).
    ``start_limit_burst`` starts of the unit within ``start_limit_interval_s`` end a crash
    loop (systemd's StartLimitBurst/StartLimitIntervalSec; 0, the default here, turns the
    limit off; ``nvfabric run`` sets 5 in 300 s).
    """

    restart: str = "never"
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 30.0
    socket_timeout_s: float = 60.0
    ready_timeout_s: float = 300.0
    probe_interval_s: float = 0.1
    probe_max_interval_s: float = 2.0
    gpu_reset_argv: tuple[str, ...] | None = None
    gpu_reset_timeout_s: float = 300.0
    registered_at_start: bool = False
    start_limit_burst: int = 0
    start_limit_interval_s: float = 300.0
    last_lines: int = 20
    reap_orphans: bool | None = None  # None: when running as PID 1

    def __post_init__(self) -> None:
        if self.restart not in ("never", "on-failure"):
            raise ValueError(f"restart policy must be never or on-failure, not {self.restart!r}")

