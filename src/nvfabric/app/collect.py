"""The collection of a node for a procedure: every read of the host that ``nvfabric run``
decides on, gathered before the decision that uses it, into
:class:`nvfabric.rules.nodefacts.NodeFacts` and the values it is made of. The single readers
are in ``facts/``; this module only orders them.

- :func:`fabric_manager_files`: the vendor files of fabric manager and NVLSM as found (typed
  paths, the vendor layout, ``nvfabric install`` records) and the shipped fabricmanager.cfg
  among them, read once: first the config, then the topology directory it names;
- :func:`probes`: the answers to the probes a prepared bring-up asks for
  (:meth:`nvfabric.bringup.prepared.Prepared.checks`): fabric daemons already running, each
  binary executable, NVLSM's socket served, ``nv-fabricmanager --version``, the effective
  fabric manager config's path keys, the GPUs' fabric states. The probes that wait on other
  processes run side by side;
- :func:`imex`: what the IMEX bring-up needs of a GB200/GB300 tray.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from nvfabric.artifacts.installed import InstalledTree, installed
from nvfabric.artifacts.naming import distro_dir
from nvfabric.bringup import vendor
from nvfabric.bringup.fmconfig import Effective
from nvfabric.effects.imex import channel_target
from nvfabric.effects.sockets import socket_listening
from nvfabric.facts import probes as read
from nvfabric.facts.fmconfig import check_paths, read_shipped
from nvfabric.facts.imex import tray
from nvfabric.facts.parallel import Pending
from nvfabric.facts.probes import GpuReading, executable, path_seen
from nvfabric.model import keyvalue
from nvfabric.model.commandline import command_line
from nvfabric.model.errors import NvfabricError, usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.fmkeys import ShippedConfigError
from nvfabric.model.hostpath import PathEscape, under
from nvfabric.model.inventory import Inventory
from nvfabric.model.vocab import FabricKind
from nvfabric.rules.imex import config, nodes, owner
from nvfabric.rules.imex.channels import ChannelFacts
from nvfabric.rules.imex.owner import OwnerEvidence
from nvfabric.rules.imex.tables import NODES_CONFIG_PATH
from nvfabric.rules.nodefacts import (
    ImexFacts,
    InstallSeen,
    NodeFacts,
    PathSeen,
    Probes,
    VendorFacts,
)

# -- fabric manager's files ---------------------------------------------------------------------


@dataclass(frozen=True)
class FabricManagerFiles:
    """The files the fabric manager bring-up builds on: ``vendor`` where each comes from
    (:func:`nvfabric.bringup.vendor.resolve`), ``shipped`` the shipped fabricmanager.cfg's
    text (None: none found, or ``shipped_error`` says why it cannot be used: a link, not a
    regular file, empty, unreadable), ``shipped_keys`` its TOPOLOGY_FILE_PATH and
    DATABASE_PATH (those set)."""

    vendor: vendor.Resolved = field(default_factory=vendor.Resolved)
    shipped: str | None = None
    shipped_error: NvfabricError | None = None
    shipped_keys: Mapping[str, str] = field(default_factory=dict)


def fabric_manager_files(root: str, fabric: FabricKind, typed: Mapping[str, str | None],
                         driver_version: str | None, topology_set: bool) -> FabricManagerFiles:
    """The vendor files of ``fabric`` under ``root`` and the shipped fabricmanager.cfg among
    them, read once, in the order the config decides: where the config is (typed, the
    vendor's, or an install's), its text, then every other file with the topology directory
    it names (TOPOLOGY_FILE_PATH; the vendor's when it names none; not looked up when the
    operator sets the key: ``topology_set``). ``typed``: option -> the path the operator
    typed (None: the default). Raises TypedPathMissing for a typed path that is not there;
    a shipped config that cannot be used is ``shipped_error``, raised by the bring-up."""
    wanted = vendor.wanted(fabric)
    trees: dict[str, InstalledTree | None] = {}
    first = [vf for vf in wanted if vf.key == "--fm-config"]
    seen = _seen(root, first, typed, driver_version, None, trees)
    where = vendor.resolve_file(first[0], seen, root, typed, driver_version) if first else None
    shipped, error, keys = None, None, {}
    if isinstance(where, tuple):
        shipped, error = _shipped(under(root, where[0]))
        if shipped is not None:
            eff = Effective(keyvalue.parse(shipped), shipped)
            keys = {k: v for k in ("TOPOLOGY_FILE_PATH", "DATABASE_PATH") if (v := eff.get(k))}
    topology = None if topology_set else keys.get("TOPOLOGY_FILE_PATH") or vendor.TOPOLOGY_DIR
    rest = _seen(root, [vf for vf in wanted if vf.key != "--fm-config"], typed,
                 driver_version, topology, trees)
    both = VendorFacts({**seen.paths, **rest.paths}, {**seen.installs, **rest.installs})
    return FabricManagerFiles(vendor.resolve(both, root, fabric, typed, driver_version, topology),
                              shipped, error, keys)


def _shipped(path: str) -> tuple[str | None, NvfabricError | None]:
    """The shipped fabricmanager.cfg's text at ``path`` (under the root;
    :func:`nvfabric.facts.fmconfig.read_shipped`), or the error (exit 2) of one that is not
    the vendor's readable text file."""
    try:
        return read_shipped(path), None
    except ShippedConfigError as err:
        return None, NvfabricError(err.finding, exit_code=2)
    except (OSError, UnicodeDecodeError) as err:
        problem = (err.strerror or str(err)) if isinstance(err, OSError) else "not UTF-8 text"
        return None, NvfabricError(Finding(
            "input_unreadable", "error",
            f"cannot read the shipped fabric manager config {path}: {problem}",
            "install the fabric manager package, or pass --fm-config"), exit_code=2)


def vendor_seen(root: str, fabric: FabricKind, typed: Mapping[str, str | None],
                driver_version: str | None, topology: str | None) -> VendorFacts:
    """The vendor files of ``fabric`` (:func:`nvfabric.bringup.vendor.wanted`) as found under
    ``root``: each typed path, each vendor path (``topology``: the directory the shipped
    config names, None: the vendor's), and, only for a vendor path that is not there, what the
    ``nvfabric install`` record of its component offers
    (:func:`nvfabric.artifacts.installed.installed`: its files are hashed, so a node with the
    vendor files never pays for it)."""
    return _seen(root, list(vendor.wanted(fabric)), typed, driver_version, topology, {})


def _seen(root: str, files: list[vendor.VendorFile], typed: Mapping[str, str | None],
          driver_version: str | None, topology: str | None,
          trees: dict[str, InstalledTree | None]) -> VendorFacts:
    """:func:`vendor_seen` of ``files``; ``trees``: the install records already read, by
    component (read once for all of them)."""
    paths: dict[tuple[str, str], PathSeen] = {}
    installs: dict[str, InstallSeen | None] = {}
    for vf in files:
        given = typed.get(vf.key)
        path = given if given is not None else vendor.vendor_path(vf, topology)
        if path is None:
            continue
        seen = paths[(path, vf.kind)] = path_seen(root, path, vf.kind)
        if given is not None or seen.present:
            continue
        if vf.component not in trees:
            trees[vf.component] = installed(
                root, vf.component, driver_version if vf.component == "fabricmanager" else None)
        tree = trees[vf.component]
        if tree is None:
            installs[vf.key] = None
            continue
        hit = tree.find_dir(vf.basename) if vf.kind == "dir" else tree.find(
            vf.basename, executable=vf.kind == "exec")
        installs[vf.key] = InstallSeen(hit, None if hit else tree.problem(vf.basename),
                                       tree.record, tree.host_dir)
    return VendorFacts(paths, installs)


# -- the probes of a prepared bring-up ----------------------------------------------------------


def start_gpu_read(root: str) -> Pending[GpuReading]:
    """The GPUs' fabric states (:func:`nvfabric.facts.probes.gpu_reading`) read in a thread
    from now on, for :func:`probes` later: the slowest probe starts before the bring-up is
    prepared. Read-only, so starting it early changes nothing on the node."""
    return Pending(lambda: read.gpu_reading(root), "gpus")


def probes(root: str, inventory: Inventory | None, asked: Probes,
           gpu_read: Pending[GpuReading] | None = None) -> NodeFacts:
    """The snapshot: ``inventory`` (already read: the plan comes from it) and the answer to
    each of ``asked``; ``gpu_read``: the GPU read already started (:func:`start_gpu_read`),
    used when the probes ask for the GPUs (else started here). Raises nothing of its own;
    each reader's errors are its answer."""
    # The probes that wait on other processes run side by side (before NVLSM may start, the
    # longest of them counts, not their sum): the GPU read first; fabric manager's
    # `--version` only after the process table was scanned (its own process would be taken
    # for a running fabric manager).
    if not asked.gpus:
        gpu_read = None
    elif gpu_read is None:
        gpu_read = start_gpu_read(root)
    problems = []
    for text in asked.fm_configs:
        problems += check_paths(Effective(keyvalue.parse(text), text))
    found = read.running(root, asked.services)
    versions = {b: Pending(functools.partial(read.fm_version, b), "fm-version")
                for b in asked.fm_binaries if executable(b)}
    gpu_states, gpu_error = gpu_read.result() if gpu_read is not None else (None, None)
    return NodeFacts(
        root=root, inventory=inventory, running=found,
        executables={p: executable(p) for p in asked.executables},
        sockets={p: socket_listening(p) for p in asked.sockets},
        fm_versions={b: v.result() for b, v in versions.items()},
        config_findings=tuple(problems),
        gpus=gpu_states, gpu_error=gpu_error,
    )


# -- a tray's IMEX ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImexRequest:
    """What the IMEX read needs from the options: ``owner`` (``--imex-owner``), the host
    paths of the binaries and the shipped config, the node list when the command line read
    it (``--imex-peers``: ``peers``, ``peers_text``), ``local_addresses`` given instead of
    the interfaces."""

    owner: str | None
    binary: str
    ctl: str
    shipped_config: str
    peers: str | None = None
    peers_text: str | None = None
    local_addresses: tuple[str, ...] = ()


def imex(root: str, inventory: Inventory, req: ImexRequest) -> NodeFacts:
    """The snapshot of a tray under ``root`` for the IMEX bring-up: ``inventory`` (already
    read) and ``imex`` (:class:`nvfabric.rules.nodefacts.ImexFacts`). The owner evidence and
    the channels always; what only a start needs (the daemon already running, the channel's
    target, the shipped config, the node list, the interfaces, host names, the binaries) only
    when the owner decision (pure, :func:`nvfabric.rules.imex.owner.decide` over the evidence
    just read) leaves the start to nvfabric, so a node whose IMEX the DRA driver or Slurm runs
    costs no resolver lookup. Raises NvfabricError (exit 2) for a config or node list over
    1 MiB, or an ``--imex-owner`` the evidence rules out."""
    evidence = tray.gather_evidence(root)
    chans = tray.read_channels(root)
    try:
        decision = owner.decide(evidence, req.owner, for_run=True)
    except ValueError as err:
        raise usage_error(str(err), "choose --imex-owner host, dra, slurm or none") from None
    if decision.refusal is not None or not decision.nvfabric_starts_imex:
        return NodeFacts(root, inventory, imex=ImexFacts(evidence, chans))
    return NodeFacts(root, inventory, running=read.running(root, ("imex",)),
                     imex=_start_facts(root, inventory, req, evidence, chans))


def _start_facts(root: str, inventory: Inventory, req: ImexRequest, evidence: OwnerEvidence,
                 chans: ChannelFacts) -> ImexFacts:
    """What the IMEX start reads (see :func:`imex`)."""
    channel_at, escape = "", None
    try:
        channel_at = channel_target(root, 0)
    except PathEscape as err:
        escape = str(err)
    problem = tray.shipped_problem(root, req.shipped_config)
    shipped = tray.read_file(root, req.shipped_config) if problem is None else None
    if problem is None and shipped is not None and not keyvalue.parse(shipped).items():
        problem = "is empty (no KEY=VALUE line)"
    # the node list the shipped config names: a read that depends on the file read just now
    where, text, why = req.peers or "", req.peers_text, ""
    if problem is None and req.peers is None:
        where = config.node_config_path(shipped, NODES_CONFIG_PATH)
        text = tray.read_file(root, where)
        why = "" if text is not None else _unread_why(under(root, where))
    names: list[str] = []
    if text is not None:
        try:
            names = [p.text for p in nodes.parse_nodes_config(text) if p.kind == "hostname"]
        except nodes.PeerError:
            names = []

    def resolve(path: str) -> str:
        return path if os.path.abspath(root) == "/" else under(root, path)

    return ImexFacts(
        evidence, chans, channel_at, escape, shipped, problem, where, text, why,
        addresses=req.local_addresses or tray.node_addresses(root),
        local_names=tray.local_names(root), resolved=tray.resolve_names(root, names),
        executables={b: executable(resolve(b)) for b in (req.binary, req.ctl)},
        install_line=_imex_install_line(root, inventory))


def _unread_why(path: str) -> str:
    """Why :func:`nvfabric.facts.imex.tray.read_file` gave nothing for ``path``: it does not
    exist, it is a link that leaves the root (read as missing, never followed out), or it is
    not a readable regular file. One phrase, for the finding's message."""
    kind = tray.not_regular(path)
    if kind is None:
        return "cannot be read"
    if kind[0] == "missing":
        return "does not exist"
    if kind[0] == "link":
        return f"is a symbolic link to {kind[1]!r} that leaves the root or leads nowhere"
    return "is not a regular file"


def _imex_install_line(root: str, inventory: Inventory) -> str:
    """The ``nvfabric install`` line that puts nvidia-imex where ``run`` looks (the package's
    ``/usr/bin``; a redist archive under ``/opt/nvfabric`` is not read for IMEX): the node's
    package family from its os-release (rpm distributions: ``--source rpm``, else apt), with
    ``--root`` when the node is not ``/`` (RUN.md R08)."""
    distro = distro_dir(dict(inventory.os_release)) or ""
    source = "apt" if not distro or distro.startswith(("ubuntu", "debian")) else "rpm"
    return command_line("install", root=root, options=(
        ("--source", source), ("--components", "imex"),
        ("--driver-version", inventory.driver_version)))
