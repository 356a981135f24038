"""``Prepared``: what ``nvfabric run`` will do on a node, the one value every fabric kind's
``prepare`` returns (nvswitch and nvlink5: :func:`nvfabric.bringup.fabricmanager.prepare`; mnnvl:
:func:`nvfabric.bringup.mnnvl.prepare`; none: nothing). The applier
(:func:`nvfabric.effects.apply.apply`) makes it true on the host, the supervisor runs its
processes, and the dry-run renderer (:mod:`nvfabric.cli.run`) prints it. Pure values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from nvfabric.bringup.spec import PlannedFile, ServiceSpec
from nvfabric.model.findings import Finding
from nvfabric.rules.nodefacts import Probes
from nvfabric.rules.preflight import Process

if TYPE_CHECKING:
    from nvfabric.rules.imex.channels import ChannelFacts
    from nvfabric.rules.imex.nodes import Peer
    from nvfabric.rules.imex.owner import Ownership
    from nvfabric.rules.preflight import Process


@dataclass(frozen=True)
class ChannelNode:
    """A character device node to make before the start (IMEX channel0): ``path`` its host
    path (``/dev/nvidia-caps-imex-channels/channel0``), ``target`` where it is made (under
    the root, confined), ``major``/``minor``; mode 0666 as NVIDIA documents."""

    path: str
    target: str
    major: int
    minor: int

    def action(self) -> str:
        """The dry-run line: ``mknod <target> c <major> <minor> && chmod 0666 <target>``."""
        return f"mknod {self.target} c {self.major} {self.minor} && chmod 0666 {self.target}"


@dataclass(frozen=True)
class ImexPart:
    """The IMEX side of a mnnvl bring-up, for its report: who owns IMEX (``ownership``),
    the channel facts read and the node list checked; ``ready_query``: the argv of the
    readiness query the supervisor runs and ``--dry-run`` prints
    (:func:`nvfabric.bringup.mnnvl.ready_argv`; empty when nvfabric starts no daemon)."""

    ownership: Ownership
    channels: ChannelFacts
    node_list: tuple[Peer, ...] = ()
    ready_query: tuple[str, ...] = ()


@dataclass(frozen=True)
class Prepared:
    """What ``run`` starts, writes and makes, in order.

    ``fabric``: the plan's fabric kind; ``processes``: service specs in start order (empty:
    nvfabric starts nothing); ``files``: written first (atomically, mode as given);
    ``channels``: device nodes made before the files; ``notes``: lines for the operator;
    ``refusals``: errors found while preparing that stop the run before any change;
    ``warnings``: reported, not blocking; ``state_dir``: the state directory under the
    root (created mode 0700 before the files); ``needs_reset``: a fabric manager restart
    needs a GPU reset on this node (R04); ``imex``: the IMEX report (mnnvl only).
    """

    fabric: str
    processes: tuple[ServiceSpec, ...] = ()
    files: tuple[PlannedFile, ...] = ()
    channels: tuple[ChannelNode, ...] = ()
    notes: tuple[str, ...] = ()
    refusals: tuple[Finding, ...] = ()
    warnings: tuple[Finding, ...] = ()
    state_dir: str = ""
    needs_reset: bool = False
    imex: ImexPart | None = None

    @property
    def services(self) -> tuple[ServiceSpec, ...]:
        """The processes (the supervisor's word)."""
        return self.processes

    def actions(self) -> list[str]:
        """What is done besides writing the files (``mknod`` lines), for ``--dry-run``."""
        return [c.action() for c in self.channels]

    def preflight_processes(self) -> tuple[Process, ...]:
        """What :func:`nvfabric.rules.preflight.preflight` checks of each process."""
        return tuple(Process(s.name, s.argv[0], s.ready_socket, s.restart_needs_gpu_reset)
                     for s in self.processes)

    def checks(self) -> Probes:
        """The host probes its preflight needs answered (:func:`nvfabric.app.collect.probes`):
        fabric manager running, each binary, NVLSM's socket, fabric manager's version, the
        effective config's path keys, the GPUs' fabric states where R04 applies."""
        fm = [s for s in self.processes if s.name == "fabricmanager"]
        return Probes(
            services=("fabricmanager",) if fm else (),
            executables=tuple(s.argv[0] for s in self.processes),
            sockets=tuple(s.ready_socket for s in self.processes if s.ready_socket),
            fm_binaries=tuple(s.argv[0] for s in fm),
            fm_configs=tuple(f.content for f in self.files
                             if f.path.endswith("/fabricmanager.cfg")),
            gpus=self.needs_reset and any(s.restart_needs_gpu_reset for s in self.processes))
