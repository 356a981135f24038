"""``NodeFacts``: one immutable snapshot of what ``nvfabric run`` reads from a node (a root
directory), taken once per command by :func:`nvfabric.app.collect.probes` before anything is
decided. The rules (:mod:`nvfabric.rules.preflight`) and the bring-ups
(:mod:`nvfabric.bringup`) are pure functions of it and of the operator's options.

What is in it, and where each part is read (all under the root):

- ``inventory``: PCI, VPD, InfiniBand ports, driver (:func:`nvfabric.facts.inventory.collect`);
- ``running``: fabric daemons already running, whoever started them (pid files, the process
  table, fabric manager's command port: :func:`nvfabric.facts.services.read`);
- ``executables``, ``sockets``, ``fm_versions``, ``config_findings``, ``gpus``: the answers to
  the :class:`Probes` a prepared bring-up asks for (a binary is an executable file; a process
  serves a Unix socket; what ``nv-fabricmanager --version`` prints; the path keys of the
  effective fabric manager config exist; the GPUs' fabric states, NVML or nvidia-smi). Each
  probe is an independent value: they may be read in any order or at once;
- ``imex``: the IMEX facts of a GB200/GB300 tray (:class:`ImexFacts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nvfabric.model.findings import Finding
from nvfabric.model.vocab import Service

if TYPE_CHECKING:  # value types only: nothing else runs when this module is imported
    from nvfabric.model.health import GpuFabric
    from nvfabric.model.inventory import Inventory
    from nvfabric.rules.imex.channels import ChannelFacts
    from nvfabric.rules.imex.owner import OwnerEvidence


@dataclass(frozen=True)
class RunningService:
    """A fabric daemon found running on the node: ``name`` (``fabricmanager``, ``imex``,
    ``nvlsm``), its ``pid`` (None when only its socket or port was seen) and ``detail``
    (how it was found: ``pid file /run/...``, ``process nv-fabricmanager``)."""

    name: str
    pid: int | None
    detail: str


@dataclass(frozen=True)
class VersionRead:
    """What ``<binary> --version`` gave: ``version`` parsed (None when the output has none),
    ``text`` the output; ``error`` why it could not be run (a timeout or an exec error, in
    words); ``hint``: what to do about that error when the reader knows better than "check
    the installation" (a binary whose loader or interpreter is absent here); ``finding``:
    the probe door's ``probe_limit`` when it was killed at a cap."""

    version: str | None
    text: str = ""
    error: str | None = None
    hint: str | None = None
    #: the reader's own finding when the program met a cap (``probe_limit``: its output or
    #: its time), which the preflight reports as it is
    finding: Finding | None = None


@dataclass(frozen=True)
class Probes:
    """The host checks a prepared bring-up needs answered before it starts (its ``checks``):
    ``services`` to look for running; ``executables``, ``sockets`` and ``fm_binaries`` (run
    with ``--version``) as host paths already under the root; ``fm_configs``: effective fabric
    manager config texts whose path keys are checked; ``gpus``: read the GPUs' fabric
    states (R04)."""

    services: tuple[Service, ...] = ()
    executables: tuple[str, ...] = ()
    sockets: tuple[str, ...] = ()
    fm_binaries: tuple[str, ...] = ()
    fm_configs: tuple[str, ...] = ()
    gpus: bool = False


@dataclass(frozen=True)
class PathSeen:
    """A vendor path as found under the root: ``present`` (of its kind: an executable file,
    a regular file, a directory); ``outside``: where a link on it leads out of the root (a
    copied image's absolute link points at the host's file, not the node's), then not
    present."""

    present: bool
    outside: str | None = None


@dataclass(frozen=True)
class InstallSeen:
    """What the ``nvfabric install`` record of a component offers for one vendor file:
    ``hit`` its host path (None: not there or not intact), ``problem`` why not (None: no
    reason known), the record's host path and the install's directory."""

    hit: str | None
    problem: str | None
    record: str
    host_dir: str


@dataclass(frozen=True)
class VendorFacts:
    """The vendor files of a fabric kind as found (:func:`nvfabric.app.collect.vendor_seen`):
    ``paths``: (host path, kind ``exec|file|dir``) -> :class:`PathSeen`, for every typed and
    vendor path looked at; ``installs``: vendor file key (``--fm-bin``, ``topology``) -> the
    install record's answer, None when the component has no install; a key is absent when
    its vendor path was present (the record is not read then)."""

    paths: Mapping[tuple[str, str], PathSeen] = field(default_factory=dict)
    installs: Mapping[str, InstallSeen | None] = field(default_factory=dict)


@dataclass(frozen=True)
class ImexFacts:
    """What the IMEX bring-up reads of a tray, all at once: ``evidence`` of who owns IMEX;
    ``channels`` (nodes, major, driver params); ``channel_at``: where channel0 would be made
    (confined under the root) or ``channel_escape``: why it cannot be (a link leaves the root);
    ``shipped``: the shipped config.cfg text (None: absent), ``shipped_problem``: why it is
    not usable; ``node_list_path``/``node_list_text``: the node list file and its text (None
    when unreadable, ``node_list_why`` then says why); ``addresses``: this node's interface
    addresses (or ``--imex-local-address``); ``local_names``: its own host names;
    ``resolved``: each host name of the node list -> its addresses; ``executables``: the
    IMEX binaries -> executable; ``install_line``: the ``nvfabric install`` line for the
    node's package family."""

    evidence: OwnerEvidence
    channels: ChannelFacts
    channel_at: str = ""
    channel_escape: str | None = None
    shipped: str | None = None
    shipped_problem: str | None = None
    node_list_path: str = ""
    node_list_text: str | None = None
    node_list_why: str = ""
    addresses: tuple[str, ...] = ()
    local_names: tuple[str, ...] = ()
    resolved: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    executables: Mapping[str, bool] = field(default_factory=dict)
    install_line: str = ""


@dataclass(frozen=True)
class NodeFacts:
    """The snapshot (see the module docstring). Mappings are keyed by host path under the
    root; a path not probed is absent (the rules treat it as not asked). ``gpus``: the GPUs'
    fabric states when they were asked for; ``gpu_error``: why none could be read (the
    reader's error: a hung or failing nvidia-smi, NVML unavailable), None when they were."""

    root: str
    inventory: Inventory | None = None
    running: tuple[RunningService, ...] = ()
    executables: Mapping[str, bool] = field(default_factory=dict)
    sockets: Mapping[str, bool] = field(default_factory=dict)
    fm_versions: Mapping[str, VersionRead] = field(default_factory=dict)
    config_findings: tuple[Finding, ...] = ()
    gpus: tuple[GpuFabric, ...] | None = None
    gpu_error: str | None = None
    imex: ImexFacts | None = None
