"""Fabric daemons as values: what to exec, with which environment, how to tell it is ready.

A :class:`ServiceSpec` is everything :mod:`nvfabric.supervisor` needs to run one daemon; the
supervisor runs a list of them as one unit, starting each once the one before it is ready and
stopping them in reverse order. Each daemon has a module here that knows its vendor layout
(default paths), builds its argv from validated values and names its readiness signal:

- :mod:`.nvlsm`: NVLink Subnet Manager (NVLink 5 baseboards), ready when its IPC socket exists;
- :mod:`.fabricmanager`: ``nv-fabricmanager``, ready when every GPU's fabric state is completed;
- :mod:`.imex`: ``nvidia-imex``, ready when ``nvidia-imex-ctl -q`` prints READY.

Pure: no I/O here or in the per-daemon builders (``--version`` is run by
:func:`nvfabric.facts.probes.fm_version`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from nvfabric.model.findings import Finding
from nvfabric.model.vocab import FindingCode, Service
from nvfabric.model.words import seconds

#: A port GUID as NVLSM and fabric manager take it on their command line: ``0x`` + 16 hex
#: digits (Fabric Manager User Guide, "NVLink 5": ``-g`` / ``FM_SM_MGMT_PORT_GUID``).
GUID = re.compile(r"0x[0-9a-fA-F]{16}")


@dataclass(frozen=True)
class ReadyProbe:
    """How the supervisor speaks of a probed service's readiness (``ready_gpus``), in that
    daemon's own terms.

    ``label``: what the probe reads, the subject of its log lines (``GPU fabric state: 8 GPUs:
    completed x8``); ``waiting``: what follows the label while the probe has no answer yet or
    says not yet (``GPU fabric state not readable yet: <why>``, ``IMEX not READY yet: <why>``);
    ``stuck_code``, ``stuck_message``, ``stuck_hint``: the warning given once the readiness
    timeout passes, ``{timeout}`` in the message standing for its seconds and ``{last}`` for
    the probe's last answer (``no answer`` when none came).
    """

    label: str
    waiting: str
    stuck_code: FindingCode
    stuck_message: str
    stuck_hint: str

    def stuck(self, service: str, timeout_s: float, last: str | None) -> Finding:
        """The stuck finding: a warning (the daemon may still finish), with the service, the
        timeout and the probe's last answer (``last_probe``) as fields."""
        fields: dict[str, object] = {"service": service, "timeout_s": timeout_s}
        if last:
            fields["last_probe"] = last
        return Finding(self.stuck_code, "warning",
                       self.stuck_message.format(timeout=seconds(timeout_s),
                                                 last=last or "no answer"),
                       self.stuck_hint, fields)


#: The default probe of ``ready_gpus``: every GPU's fabric state is completed, which fabric
#: manager brings about (NVLSM too on NVLink 5). CUDA error 802: CUDA Runtime API,
#: cudaErrorSystemNotReady ("system not yet initialized").
GPU_REGISTRATION = ReadyProbe(
    label="GPU fabric state",
    waiting="not readable yet",
    stuck_code="registration_stuck",
    stuck_message="GPUs have not finished registering with the NVLink fabric {timeout} s after "
    "fabric manager started; CUDA returns error 802 (system not yet initialized) until they "
    "do; not reporting ready",
    stuck_hint="look for fabric manager errors above and run `nvfabric status`; a state stuck "
    "in progress usually means fabric manager or NVLSM cannot reach the NVSwitches",
)


@dataclass(frozen=True)
class ServiceSpec:
    """One daemon of a unit.

    ``name``: the service word of the plan (``nvlsm``, ``fabricmanager``, ``imex``), also the
    prefix of its output lines. ``argv``: the exact command, argv[0] an absolute path (no
    shell, ever). ``env``: variables added to nvfabric's own environment.

    Readiness (the next service starts, and the unit is reported ready, only once it holds):

    - ``ready_socket``: a path where the daemon creates a Unix socket (NVLSM's IPC socket)
      and listens on it; waited for with an event-driven watch, then confirmed listening in
      the kernel's table of Unix sockets, bounded by the supervisor's socket timeout;
    - ``ready_gpus``: every GPU's fabric state is ``completed`` (read through the health
      module); bounded by the supervisor's readiness timeout, which yields a finding, not a
      stop (the daemon may still finish);
    - ``ready_line``: a regular expression; a matching output line means ready when
      ``ready_gpus`` is off, and prompts an immediate GPU check when it is on;
    - ``ready_probe``: how the readiness probe of a ``ready_gpus`` service is logged and what
      its timeout yields (default :data:`GPU_REGISTRATION`; IMEX has its own);
    - none of them: ready as soon as it is spawned.

    ``grace_s``: seconds between SIGTERM and SIGKILL when stopping it. ``runtime_dirs``:
    directories created before the start (mode 0700, never widened when they exist).
    ``restart_needs_gpu_reset``: restarting it once GPUs registered requires a GPU reset first
    (RUN.md R04; fabric manager on Hopper and later). ``pid_file``: where the daemon writes its
    pid, removed by nvfabric when stale.
    """

    name: Service
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    ready_socket: str | None = None
    ready_gpus: bool = False
    ready_line: str | None = None
    ready_probe: ReadyProbe = GPU_REGISTRATION
    grace_s: float = 10.0
    runtime_dirs: tuple[str, ...] = ()
    restart_needs_gpu_reset: bool = False
    pid_file: str | None = None

    def __post_init__(self) -> None:
        if not self.argv or not self.argv[0].startswith("/"):
            raise ValueError(f"{self.name}: argv[0] must be an absolute path, got {self.argv!r}")
        for arg in self.argv:
            if "\x00" in arg:
                raise ValueError(f"{self.name}: NUL in argument {arg!r}")


@dataclass(frozen=True)
class PlannedFile:
    """A file nvfabric writes before starting the unit (shown by ``run --dry-run``)."""

    path: str
    content: str
    mode: int = 0o644


def written_by_run(argv: Sequence[str], files: Sequence[PlannedFile]) -> tuple[str, ...]:
    """The paths of ``files`` (what ``run`` writes before it starts anything) that ``argv``
    names, as a word or an option's value (``--u=PATH``), in argv order: an argv a dry run
    prints names files that exist only once the run wrote them."""
    planned = {f.path for f in files}
    out: list[str] = []
    for word in argv:
        path = word if word in planned else word.partition("=")[2]
        if path in planned and path not in out:
            out.append(path)
    return tuple(out)


def check_guid(guid: str) -> str:
    """``guid`` lower-cased when it is ``0x`` + 16 hex digits; ValueError otherwise."""
    if not GUID.fullmatch(guid):
        raise ValueError(f"port GUID must be 0x followed by 16 hex digits, got {guid!r}")
    return guid.lower()
