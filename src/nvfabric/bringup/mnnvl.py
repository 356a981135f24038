"""The mnnvl bring-up of ``nvfabric run`` (GB200/GB300 compute trays): decide who owns IMEX,
then either start nothing and report (DRA driver, Slurm, the host unit, nobody), or, when
nvfabric is the host owner, make channel0 when it is missing, write the checked node list and
the effective config.cfg into the state directory, and supervise ``nvidia-imex -c <cfg>``
until ``nvidia-imex-ctl -q`` prints READY (RUN.md R07). Never fabric manager.

Pure: :func:`prepare` is a function of the node's snapshot
(:func:`nvfabric.app.collect.imex`, read before) and the options; it returns the same
:class:`nvfabric.bringup.prepared.Prepared` as the fabric manager bring-up, so ``--dry-run``
shows exactly what :func:`nvfabric.effects.apply.apply` and the supervisor would do.

The daemon, ``nvidia-imex``, lets GPUs of different trays import and export memory over the
NVLink fabric. Vendor layout (NVIDIA IMEX guide, "Getting Started with IMEX" and "IMEX
Service Command Service"; tests/data/corpus/configs/aws-parallelcluster-nvidia-imex.service.erb):
``/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg``, queried with
``/usr/bin/nvidia-imex-ctl``. Under nvfabric the daemon runs in the foreground (DAEMONIZE=0 in
the effective config, see :mod:`nvfabric.rules.imex.config`) with its log on stderr. It is
ready when ``nvidia-imex-ctl -c <cfg> -q`` prints READY; every ctl call runs under a hard
timeout (the tool is known to hang). ``nvidia-imex --version`` prints ``IMEX version is:
570.172``; the daemon checks the loaded driver's version itself at start and aborts on a
mismatch (IMEX guide, "Other NVIDIA Software Packages"), so ``run`` does not probe it
beforehand; :func:`parse_version` reads either line (``--version`` or the log).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace

from nvfabric.bringup.prepared import ChannelNode, ImexPart, Prepared
from nvfabric.bringup.spec import PlannedFile, ReadyProbe, ServiceSpec
from nvfabric.model import keyvalue
from nvfabric.model.commandline import command_line
from nvfabric.model.errors import usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import check as check_path
from nvfabric.model.hostpath import under
from nvfabric.model.keyvalue import ConfigValueError
from nvfabric.model.words import plural
from nvfabric.rules.imex import channels, config, nodes, owner
from nvfabric.rules.imex.nodes import node_list_id
from nvfabric.rules.imex.tables import (
    CONFIG_PATH,
    CTL_TIMEOUT_S,
    IMEX_BINARY,
    IMEX_CTL_BINARY,
    NODES_CONFIG_PATH,
    RUN_OWNER_FILE,
)
from nvfabric.rules.nodefacts import ImexFacts, NodeFacts
from nvfabric.rules.plan import Plan
from nvfabric.rules.preflight import service_running

BINARY = IMEX_BINARY
CTL_BINARY = IMEX_CTL_BINARY
CONFIG = CONFIG_PATH
NODES_CONFIG = NODES_CONFIG_PATH

#: ``nvidia-imex --version`` ("IMEX version is: X") and the startup banner ("IMEX version X is
#: running"): capture tests/data/corpus/imex/imex-570.00-daemon-startup-dra289.log.
_VERSION = re.compile(r"IMEX version(?: is)?:?\s+(\d+\.\d+(?:\.\d+)?)")


def _stuck_hint(domain: str) -> str:
    """What an IMEX daemon that is not READY needs; ``domain`` the ``imex domain`` line."""
    return ("NOT READY: it has not connected to the IMEX peers of its node list: every tray of "
            "the list (IMEX_NODE_CONFIG_FILE) must run nvidia-imex with the same list and reach "
            f"the others on SERVER_PORT (50000); `{domain}` names the unreachable peers. No "
            "answer: nvidia-imex-ctl hangs while the daemon does not answer; look at the "
            "daemon's lines above")


#: How the supervisor speaks of IMEX readiness: ``nvidia-imex-ctl -q`` prints READY once the
#: daemon has connected to the nodes of its node list (IMEX_WAIT_FOR_QUORUM; NVIDIA IMEX guide,
#: "IMEX Service Config Options" and "The nvidia-imex-ctl Tool"); until then CUDA cannot import
#: memory exported by other trays.
IMEX_READY = ReadyProbe(
    label="IMEX",
    waiting="not READY yet",
    stuck_code="imex_not_ready",
    stuck_message="the IMEX daemon has not reported READY {timeout} s after it started "
    "(last answer: {last}); CUDA cannot import memory from other trays until it does; not "
    "reporting ready",
    stuck_hint=_stuck_hint("nvfabric imex domain"),
)


def imex_ready(root: str, config: str) -> ReadyProbe:
    """:data:`IMEX_READY` with a hint whose ``imex domain`` asks the daemon ``run`` starts on
    the node it was asked about: its ``--root`` and the effective config ``config`` (host
    path) the daemon runs with."""
    domain = command_line("imex", "domain", root=root, options=(("--config", config),))
    return replace(IMEX_READY, stuck_hint=_stuck_hint(domain))


@dataclass(frozen=True)
class ImexPaths:
    """Where IMEX lives, host view. ``shipped_config`` is read, never edited by ``run``; the
    effective config and node list nvfabric writes live in its state directory."""

    binary: str = BINARY
    ctl: str = CTL_BINARY
    shipped_config: str = CONFIG
    nodes_config: str = NODES_CONFIG


def argv(binary: str, config: str) -> tuple[str, ...]:
    """``nvidia-imex -c <config>``; ValueError on a bad path."""
    return (check_path(binary, "nvidia-imex binary"), "-c", check_path(config, "IMEX config"))


def ready_argv(ctl: str, config: str, socket: str | None = None) -> tuple[str, ...]:
    """The readiness query ``run`` asks and ``--dry-run`` prints: ``nvidia-imex-ctl -c
    <config> -q`` (READY once the local daemon has its quorum and serves requests); with
    ``socket``, ``nvidia-imex-ctl -q --u=<socket>`` over the daemon's Unix command socket
    instead, as the DRA driver's kubelet plugin asks it in imex.mode=hostManaged before it
    hands out a channel (DRA driver prerequisites, "Host IMEX readiness check"). Full paths;
    ValueError on a bad one."""
    tool = check_path(ctl, "nvidia-imex-ctl")
    if socket:
        return (tool, "-q", "--u=" + check_path(socket, "IMEX socket"))
    return (tool, "-c", check_path(config, "IMEX config"), "-q")


def spec(binary: str, config: str, grace_s: float = 10.0,
         probe: ReadyProbe = IMEX_READY) -> ServiceSpec:
    """IMEX as a service of the unit. Ready when ``nvidia-imex-ctl -q`` prints READY: the
    supervisor's readiness probe (``ready_gpus``; the probe the mnnvl path gives it is
    :func:`nvfabric.facts.imex.ready.readiness_probe`, each ctl call under a hard timeout), logged
    and timed out in IMEX's terms (``probe``: :func:`imex_ready`, ``imex_not_ready``)."""
    return ServiceSpec(name="imex", argv=argv(binary, config), ready_gpus=True,
                       ready_probe=probe, grace_s=grace_s)


def parse_version(text: str) -> str | None:
    """The version from ``nvidia-imex --version`` output or its startup banner, or None."""
    match = _VERSION.search(text)
    return match.group(1) if match else None


EFFECTIVE_CFG = "imex/config.cfg"
EFFECTIVE_NODES = "imex/nodes_config.cfg"


@dataclass(frozen=True)
class ImexRunOptions:
    """Operator choices (host paths; resolved under ``root``). ``owner``: ``--imex-owner``
    (None: detect); ``peers_file``: ``--imex-peers`` (None: the node list the shipped config
    names); ``peers_text``: that file's text, read by the command line like ``imex config
    --peers`` reads it (an unreadable or binary file is exit 2 there); ``local_addresses``:
    ``--imex-local-address`` (empty: the node's interfaces)."""

    root: str = "/"
    state_dir: str = "/run/nvfabric"
    owner: str | None = None
    paths: ImexPaths = field(default_factory=ImexPaths)
    peers_file: str | None = None
    peers_text: str | None = None
    local_addresses: tuple[str, ...] = ()
    ctl_timeout_s: float = CTL_TIMEOUT_S
    grace_s: float = 10.0

    def resolve(self, path: str) -> str:
        return under(self.root, path) if os.path.abspath(self.root) != "/" else path

    @property
    def ready_file(self) -> str:
        return os.path.join(self.resolve(self.state_dir), "ready")


def prepare(facts: NodeFacts, p: Plan, opts: ImexRunOptions) -> Prepared:
    """The mnnvl bring-up from ``facts.imex`` (:func:`nvfabric.app.collect.imex`).
    Raises NvfabricError (exit 2) when channel0 would be made through a link that leaves the
    root, or the shipped config is not the vendor's regular file."""
    imex = facts.imex
    assert imex is not None, "collect_imex first"
    decision = owner.decide(imex.evidence, opts.owner, for_run=True)
    part = ImexPart(decision, imex.channels)
    if decision.refusal is not None:  # two owners, or an owner not known
        return Prepared("mnnvl", refusals=(decision.refusal,), imex=part)
    # The channels the owner needs: the same answer status gives (channel0, unless Slurm's
    # switch plugin or the DRA driver make them per job or claim).
    required = decision.required_channels if decision.owner != "none" else ()
    if not decision.nvfabric_starts_imex:
        return Prepared("mnnvl", warnings=channels.check(imex.channels, required), imex=part)
    refusals = list(service_running(facts.running, ("imex",), facts.root))
    create = 0 in required and channels.needs_create(imex.channels, 0)
    warnings: list[Finding] = []
    if create and imex.channel_escape is not None:  # before anything is written
        raise usage_error(imex.channel_escape, "a link on the channel's path under --root (the "
                          "channel directory, a directory above it, or the channel "
                          "node itself) leads out of it: remove that link (or point it "
                          "inside the root); nothing was started or created")
    if imex.channels.major is None:
        refusals += channels.check(imex.channels)
    else:
        warnings += [f for f in channels.check(imex.channels, required)
                     if f.code != "imex_channel_missing" or not create]
    shipped_path = opts.resolve(opts.paths.shipped_config)
    if imex.shipped_problem is not None:
        raise usage_error(f"the shipped IMEX config {shipped_path} {imex.shipped_problem}",
                          "reinstall the nvidia-imex package (its config.cfg is a regular file "
                          "with the keys of that version), or pass --imex-config")
    notes = []
    if imex.shipped is None:
        notes.append(f"no shipped IMEX config at {shipped_path}: using nvfabric's minimal "
                     "config (documented defaults)")
    peers, more, note = _checked_node_list(imex, opts, p.driver_version)
    refusals += more + _binaries(imex, opts, p.driver_version)
    notes += note
    daemon, query, files, bad = _daemon(imex, opts, peers, decision)
    refusals += bad
    notes.append(f"effective IMEX config: {files[1].path} (from {shipped_path}, which is not "
                 "edited)")
    made = (ChannelNode(channels.channel_path(0), imex.channel_at or channels.channel_path(0),
                        imex.channels.major, 0),) \
        if create and imex.channels.major is not None else ()
    return Prepared("mnnvl", (daemon,) if daemon else (), files, made, tuple(notes),
                    tuple(refusals), tuple(warnings), opts.resolve(opts.state_dir),
                    imex=ImexPart(decision, imex.channels, peers, query))


def _checked_node_list(imex: ImexFacts, opts: ImexRunOptions, driver_version: str | None
                       ) -> tuple[tuple[nodes.Peer, ...], list[Finding], list[str]]:
    """The node list, its refusals (unreadable, invalid, this node not in it) and its note."""
    peers, source, problem = _node_list(imex, opts)
    if problem is not None:
        return peers, [problem], []
    refusals = [f for f in nodes.validate(peers, driver_version) if f.severity == "error"]
    local = nodes.check_local(peers, imex.addresses, imex.local_names, imex.resolved)
    if local is not None:
        refusals.append(local)
    return peers, refusals, [f"IMEX node list: {plural(len(peers), 'entry')} from "
                             f"{_shown(source, opts)} ({node_list_id(p.text for p in peers)})"]


def _shown(where: str, opts: ImexRunOptions) -> str:
    """The node list's file as the operator reaches it: ``--imex-peers`` as typed, the host
    path the shipped config names under the root."""
    return where if opts.peers_file is not None else opts.resolve(where)


def _binaries(imex: ImexFacts, opts: ImexRunOptions, driver_version: str | None
              ) -> list[Finding]:
    """``binary_missing`` for nvidia-imex and nvidia-imex-ctl when not executable (R08)."""
    out = []
    for binary, what, flag in ((opts.paths.binary, "nvidia-imex", "--imex-bin"),
                               (opts.paths.ctl, "nvidia-imex-ctl", "--imex-ctl")):
        if imex.executables.get(binary, False):
            continue
        real, line = opts.resolve(binary), imex.install_line
        out.append(Finding(
            "binary_missing", "error", f"{what} is not installed at {real} (or not "
            "executable): the node lacks the nvidia-imex package of driver "
            f"{driver_version or 'loaded'}",
            f"install it: `{line}` (prints the package manager's commands; add --execute "
            f"to run them), or pass {flag}",
            {"service": "imex", "path": real, "file": flag, "install": line}))
    return out


def _daemon(imex: ImexFacts, opts: ImexRunOptions, peers: tuple[nodes.Peer, ...],
            decision: owner.Ownership
            ) -> tuple[ServiceSpec | None, tuple[str, ...], tuple[PlannedFile, ...],
                       list[Finding]]:
    """The nvidia-imex spec, its readiness query (:func:`ready_argv`), the files the run
    writes (node list, effective config, then the owner record
    :data:`~nvfabric.rules.imex.tables.RUN_OWNER_FILE`) and their refusals. For ``dra-host``
    the daemon serves the command socket the DRA driver's host-managed mode queries
    (``decision.socket``, host path; IMEX_CMD_UNIX_DOMAIN_PATH) and readiness is asked there."""
    state = opts.resolve(opts.state_dir)
    cfg_path = os.path.join(state, EFFECTIVE_CFG)
    nodes_path = os.path.join(state, EFFECTIVE_NODES)
    socket = opts.resolve(decision.socket) if decision.socket else None
    refusals = []
    try:
        text = config.effective(imex.shipped, config.run_overrides(
            keyvalue.parse(imex.shipped or config.MINIMAL_CONFIG), nodes_path, socket))
    except ConfigValueError as err:
        refusals.append(Finding(
            "config_invalid_value", "error", f"IMEX config: {err}",
            "use a shorter --state-dir (IMEX paths are limited to 256 characters)",
            {"key": err.key}))
        text = ""
    daemon: ServiceSpec | None = None
    query: tuple[str, ...] = ()
    try:
        daemon = spec(opts.resolve(opts.paths.binary), cfg_path, opts.grace_s, imex_ready(
            opts.root, os.path.join(opts.state_dir, EFFECTIVE_CFG)))
        query = ready_argv(opts.resolve(opts.paths.ctl), cfg_path, socket)
    except ValueError as err:
        refusals.append(Finding("config_invalid_value", "error", str(err), "pass absolute paths",
                                {"key": "path"}))
    # who this run serves IMEX as, from its start: `imex owner` and status read it back
    record = {"owner": decision.owner, "socket": decision.socket}
    files = (PlannedFile(nodes_path, nodes.render(peers), 0o644),
             PlannedFile(cfg_path, text, 0o644),
             PlannedFile(os.path.join(state, RUN_OWNER_FILE), json.dumps(record) + "\n", 0o644))
    return daemon, query, files, refusals


def _node_list(imex: ImexFacts, opts: ImexRunOptions
               ) -> tuple[tuple[nodes.Peer, ...], str, Finding | None]:
    """The node list parsed (``--imex-peers`` text, else the file the shipped config names),
    where it came from, or the finding of why there is none."""
    where, text = imex.node_list_path, imex.node_list_text
    if text is None:
        return (), where, Finding(
            "config_invalid_value", "error",
            f"no IMEX node list: {opts.resolve(where)} {imex.node_list_why}",
            "write the addresses of every tray of the domain there (`"
            + command_line("imex", "config", root=opts.root, options=(
                ("--config", None if opts.paths.shipped_config == CONFIG
                 else opts.paths.shipped_config), ("--peers", "FILE")))
            + "`), or pass --imex-peers FILE", {"key": "IMEX_NODE_CONFIG_FILE"})
    try:
        return nodes.parse_nodes_config(text), where, None
    except nodes.PeerError as err:
        return (), where, Finding("config_invalid_value", "error",
                                  f"{_shown(where, opts)}: {err}",
                                  "one IP address or host name per line", {"key": "nodes"})


def imex_json(prepared: Prepared) -> dict[str, object]:
    """The ``imex`` object of ``run --json`` on a tray: the ownership, the node list and its
    id, the channel facts, the readiness query (argv; None when nvfabric starts no daemon)."""
    part = prepared.imex
    assert part is not None
    return {**part.ownership.to_json(),
            "node_list": [p.text for p in part.node_list],
            "node_list_id": node_list_id(p.text for p in part.node_list)
            if part.node_list else None,
            "channels": part.channels.to_json(),
            "ready_query": list(part.ready_query) or None}
