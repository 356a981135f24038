"""Read the node for ``nvfabric run``: :class:`nvfabric.rules.nodefacts.NodeFacts` and the values
it is made of. Every read of the host that ``run`` decides on goes through here, before the
decision that uses it:

- :func:`collect`: the answers to the probes a prepared bring-up asks for
  (:meth:`nvfabric.bringup.prepared.Prepared.checks`): fabric daemons already running, each
  binary executable, NVLSM's socket served, ``nv-fabricmanager --version``
  (:func:`fm_version`), the effective fabric manager config's path keys, the GPUs' fabric
  states (:func:`gpus`). Each probe is an independent read (they could run at once);
- :func:`collect_imex`: what the IMEX bring-up needs of a GB200/GB300 tray;
- :func:`vendor_seen`, :func:`fm_shipped_keys`: the vendor files present (typed paths, the
  vendor layout, ``nvfabric install`` records) and the shipped config's topology keys.

The readers underneath are today's: :mod:`nvfabric.facts.services`,
:mod:`nvfabric.facts.imexhost`, :mod:`nvfabric.facts.gpu`, :mod:`nvfabric.artifacts.installed`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nvfabric.model.commandline import command_line
from nvfabric.model.errors import usage_error
from nvfabric.model.inventory import Inventory
from nvfabric.model.vocab import FabricKind, Service
from nvfabric.rules.nodefacts import (
    ImexFacts,
    InstallSeen,
    NodeFacts,
    PathSeen,
    Probes,
    RunningService,
    VendorFacts,
    VersionRead,
)

if TYPE_CHECKING:
    from nvfabric.effects.program import Ran
    from nvfabric.facts.parallel import Pending
    from nvfabric.model.health import GpuFabric
    from nvfabric.rules.imex.channels import ChannelFacts
    from nvfabric.rules.imex.owner import OwnerEvidence


def executable(path: str) -> bool:
    """``path`` (already under the root) is a regular file this process may execute."""
    return os.path.isfile(path) and os.access(path, os.X_OK)


def running(root: str, services: tuple[Service, ...]) -> tuple[RunningService, ...]:
    """The ``services`` (``fabricmanager``, ``imex``) running on the node under ``root``
    (:func:`nvfabric.facts.services.read`: pid files, the process table, fabric manager's
    command port)."""
    if not services:
        return ()
    from nvfabric.facts.services import read

    return tuple(RunningService(s.name, s.pid, s.detail) for s in read(root, services)
                 if s.running)


#: The most of ``<binary> --version``'s output read: a version is one line; this is the limit
#: of a one-value file (an attribute, ``sys/module/nvidia/version``), and a program printing
#: more is killed at it (``yes`` as ``--fm-bin`` once filled 18.6 GB).
VERSION_MAX_BYTES = 64 << 10


def version_output(binary: str, timeout_s: float = 10.0) -> Ran:
    """``<binary> --version`` through the probe door (:func:`nvfabric.effects.program.run`:
    argv only, stdout and stderr each at most :data:`VERSION_MAX_BYTES`, killed at a cap or
    after ``timeout_s`` seconds); each daemon module parses its output with its own pattern.
    Raises OSError when it cannot be executed, PathEscape for a link out of the root,
    Stopped."""
    from nvfabric.effects import program

    return program.run([binary, "--version"], timeout_s, VERSION_MAX_BYTES, VERSION_MAX_BYTES)


def fm_version(binary: str, timeout_s: float = 10.0) -> VersionRead:
    """What ``<binary> --version`` says, parsed by
    :func:`nvfabric.bringup.fabricmanager.parse_version` (User Guide, "Startup Options");
    an exec failure, a link out of the root or a timeout is the ``error``, a cap met the
    ``probe_limit`` finding, never raised."""
    from nvfabric.bringup import fabricmanager as fm
    from nvfabric.facts.execinfo import INTERPRETER_HINT, exec_error, missing_interpreter
    from nvfabric.facts.paths import PathEscape

    try:
        ran = version_output(binary, timeout_s)
    except PathEscape as err:
        return VersionRead(None, error=str(err))
    except OSError as err:
        return VersionRead(None, error=exec_error(binary, err),
                           hint=INTERPRETER_HINT if missing_interpreter(binary) else None)
    text = (ran.stdout + ran.stderr).decode("utf-8", "replace")
    if ran.timed_out:
        return VersionRead(None, text, error=f"it did not answer within {timeout_s:g} s "
                           "(killed)")
    if ran.limit is not None:
        return VersionRead(None, text, error=ran.limit_text(), finding=ran.finding(
            "run it by hand: a fabric manager prints one version line; this is not the "
            "vendor's nv-fabricmanager (or --fm-bin names another program)"))
    return VersionRead(fm.parse_version(text), text)


def start_gpu_read(root: str) -> Pending[GpuReading]:
    """The GPUs' fabric states (:func:`gpu_reading`) read in a thread from now on, for a
    :func:`collect` that comes later: the slowest probe starts before the bring-up is
    prepared (issue 15). Read-only, so starting it early changes nothing on the node."""
    from nvfabric.facts.parallel import Pending

    return Pending(lambda: gpu_reading(root), "gpus")


def collect(root: str, inventory: Inventory | None, probes: Probes,
            gpu_read: Pending[GpuReading] | None = None) -> NodeFacts:
    """The snapshot: ``inventory`` (already read: the plan comes from it) and the answer to
    each of ``probes``; ``gpu_read``: the GPU read already started (:func:`start_gpu_read`),
    used when ``probes`` ask for the GPUs (else started here). Raises nothing of its own;
    each reader's errors are its answer."""
    from nvfabric.bringup import fmconfig as fmcfg
    from nvfabric.effects.sockets import socket_listening
    from nvfabric.facts.fmconfig import check_paths
    from nvfabric.facts.parallel import Pending
    from nvfabric.model import keyvalue

    # The probes that wait on other processes run side by side (issue 15: before NVLSM may
    # start, the longest of them counts, not their sum): the GPU read first; fabric manager's
    # `--version` only after the process table was scanned (its own process would be taken
    # for a running fabric manager).
    if not probes.gpus:
        gpu_read = None
    elif gpu_read is None:
        gpu_read = start_gpu_read(root)
    problems = []
    for text in probes.fm_configs:
        problems += check_paths(fmcfg.Effective(keyvalue.parse(text), text))
    found = running(root, probes.services)
    versions = {b: Pending(functools.partial(fm_version, b), "fm-version")
                for b in probes.fm_binaries if executable(b)}
    gpu_states, gpu_error = gpu_read.result() if gpu_read is not None else (None, None)
    return NodeFacts(
        root=root, inventory=inventory, running=found,
        executables={p: executable(p) for p in probes.executables},
        sockets={p: socket_listening(p) for p in probes.sockets},
        fm_versions={b: v.result() for b, v in versions.items()},
        config_findings=tuple(problems),
        gpus=gpu_states, gpu_error=gpu_error,
    )


#: The GPUs' fabric states and, when none could be read, why (the reader's error message).
GpuReading = tuple[tuple["GpuFabric", ...], "str | None"]


def gpu_reading(root: str) -> GpuReading:
    """The GPUs' fabric states (:func:`nvfabric.facts.gpu.read_health`: NVML, or the node's
    nvidia-smi) and, when it gave none, the message of its error finding (a hung or failing
    nvidia-smi, NVML unavailable); never raises for the reading's own failure."""
    from nvfabric.facts import gpu

    health = gpu.read_health(root)
    why = next((f.message for f in health.findings if f.severity == "error"), None)
    return tuple(health.gpus), None if health.gpus else why


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


def collect_imex(root: str, inventory: Inventory, req: ImexRequest) -> NodeFacts:
    """The snapshot of a tray under ``root`` for the IMEX bring-up: ``inventory`` (already
    read) and ``imex`` (:class:`nvfabric.rules.nodefacts.ImexFacts`). The owner evidence and the
    channels always;
    what only a start needs (the daemon already running, the channel's target, the shipped
    config, the node list, the interfaces, host names, the binaries) only when the owner
    decision (pure, :func:`nvfabric.rules.imex.owner.decide` over the evidence just read)
    leaves the start to nvfabric, so a node whose IMEX the DRA driver or Slurm runs costs no
    resolver lookup. Raises NvfabricError (exit 2) for a config or node list over 1 MiB."""
    from nvfabric.facts import imexhost as host
    from nvfabric.rules.imex import owner

    evidence = host.gather_evidence(root)
    chans = host.read_channels(root)
    try:
        decision = owner.decide(evidence, req.owner, for_run=True)
    except ValueError as err:
        raise usage_error(str(err), "choose --imex-owner host, dra, slurm or none") from None
    if decision.refusal is not None or not decision.nvfabric_starts_imex:
        return NodeFacts(root, inventory, imex=ImexFacts(evidence, chans))
    return NodeFacts(root, inventory, running=running(root, ("imex",)),
                     imex=_start_facts(root, inventory, req, evidence, chans))


def _start_facts(root: str, inventory: Inventory, req: ImexRequest, evidence: OwnerEvidence,
                 chans: ChannelFacts) -> ImexFacts:
    from nvfabric.facts import imexhost as host
    from nvfabric.facts.fs import under
    from nvfabric.model import keyvalue
    from nvfabric.rules.imex import config, nodes
    from nvfabric.rules.imex.tables import NODES_CONFIG_PATH

    channel_at, escape = "", None
    try:
        channel_at = host.channel_target(root, 0)
    except host.PathEscape as err:
        escape = str(err)
    problem = host.shipped_problem(root, req.shipped_config)
    shipped = host.read_file(root, req.shipped_config) if problem is None else None
    if problem is None and shipped is not None and not keyvalue.parse(shipped).items():
        problem = "is empty (no KEY=VALUE line)"
    where, text, why = req.peers or "", req.peers_text, ""
    if problem is None and req.peers is None:
        where = config.node_config_path(shipped, NODES_CONFIG_PATH)
        text = host.read_file(root, where)
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
        addresses=req.local_addresses or host.node_addresses(root),
        local_names=host.local_names(root), resolved=host.resolve_names(root, names),
        executables={b: executable(resolve(b)) for b in (req.binary, req.ctl)},
        install_line=_imex_install_line(root, inventory))


def _unread_why(path: str) -> str:
    """Why :func:`nvfabric.facts.imexhost.read_file` gave nothing for ``path``: it does not
    exist, it is a link that leaves the root (read as missing, never followed out), or it is
    not a readable regular file. One phrase, for the finding's message."""
    from nvfabric.facts import imexhost as host

    kind = host.not_regular(path)
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
    from nvfabric.artifacts.naming import distro_dir

    distro = distro_dir(dict(inventory.os_release)) or ""
    source = "apt" if not distro or distro.startswith(("ubuntu", "debian")) else "rpm"
    return command_line("install", root=root, options=(
        ("--source", source), ("--components", "imex"),
        ("--driver-version", inventory.driver_version)))


def vendor_seen(root: str, fabric: FabricKind, typed: Mapping[str, str | None],
                driver_version: str | None, topology: str | None) -> VendorFacts:
    """The vendor files of ``fabric`` (:func:`nvfabric.bringup.vendor.wanted`) as found under
    ``root``: each typed path, each vendor path (``topology``: the directory the shipped
    config names, None: the vendor's), and, only for a vendor path that is not there, what
    the ``nvfabric install`` record of its component offers
    (:func:`nvfabric.artifacts.installed.installed`: its files are hashed, so a node with the
    vendor files never pays for it)."""
    from nvfabric.artifacts.installed import InstalledTree, installed
    from nvfabric.bringup import vendor

    paths: dict[tuple[str, str], PathSeen] = {}
    installs: dict[str, InstallSeen | None] = {}
    trees: dict[str, InstalledTree | None] = {}
    for vf in vendor.wanted(fabric):
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
        hit = tree.find_dir(vf.basename) if vf.kind == "dir" else \
            tree.find(vf.basename, executable=vf.kind == "exec")
        installs[vf.key] = InstallSeen(hit, None if hit else tree.problem(vf.basename),
                                       tree.record, tree.host_dir)
    return VendorFacts(paths, installs)


def path_seen(root: str, path: str, kind: str) -> PathSeen:
    """``path`` under ``root``: present as ``kind`` (``exec``: an executable regular file;
    ``file``; ``dir``), or where a link on it leads out of the root (not present then)."""
    from nvfabric.facts.paths import confined, program, under
    from nvfabric.model.hostpath import problem as path_problem

    if path_problem(path) is None:  # relative or with '..': not a question of links
        try:  # a program: the rule of every program run under a root (paths.program)
            program(under(root, path)) if kind == "exec" else confined(root, path)
        except ValueError:
            return PathSeen(False, os.path.realpath(under(root, path)))
    full = under(root, path)
    if kind == "dir":
        return PathSeen(os.path.isdir(full))
    if kind == "exec":
        return PathSeen(executable(full))
    return PathSeen(os.path.isfile(full))


def fm_shipped_keys(root: str, host_path: str) -> dict[str, str]:
    """TOPOLOGY_FILE_PATH and DATABASE_PATH of the shipped fabricmanager.cfg at
    ``host_path`` under ``root``, those set; empty when it cannot be read (it is read again,
    and refused with its reason, where the bring-up is prepared)."""
    from nvfabric.bringup import fmconfig as fmcfg
    from nvfabric.facts.paths import under
    from nvfabric.model import keyvalue

    try:
        with open(under(root, host_path), encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError):
        return {}
    eff = fmcfg.Effective(keyvalue.parse(text), text)
    return {k: v for k in ("TOPOLOGY_FILE_PATH", "DATABASE_PATH") if (v := eff.get(k))}
