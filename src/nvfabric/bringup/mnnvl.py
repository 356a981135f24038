"""The mnnvl bring-up of ``nvfabric run`` (GB200/GB300 compute trays): decide who owns IMEX,
then either start nothing and report (DRA driver, Slurm, the host unit, nobody), or, when
nvfabric is the host owner, make channel0 when it is missing, write the checked node list and
the effective config.cfg into the state directory, and supervise ``nvidia-imex -c <cfg>``
until ``nvidia-imex-ctl -q`` prints READY (RUN.md R07). Never fabric manager.

Pure: :func:`prepare` is a function of the node's snapshot
(:func:`nvfabric.facts.node.collect_imex`, read before) and the options; it returns the same
:class:`nvfabric.bringup.prepared.Prepared` as the fabric manager bring-up, so ``--dry-run``
shows exactly what :func:`nvfabric.effects.apply.apply` and the supervisor would do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from nvfabric.bringup import imexd as imex_service
from nvfabric.bringup.prepared import ChannelNode, ImexPart, Prepared
from nvfabric.bringup.spec import PlannedFile, ServiceSpec
from nvfabric.facts.fs import under
from nvfabric.model import keyvalue
from nvfabric.model.commandline import command_line
from nvfabric.model.errors import usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.keyvalue import ConfigValueError
from nvfabric.rules.imex import channels, config, nodes, owner
from nvfabric.rules.imex.domain import node_list_id, plural
from nvfabric.rules.imex.tables import CTL_TIMEOUT_S
from nvfabric.rules.nodefacts import ImexFacts, NodeFacts
from nvfabric.rules.plan import Plan
from nvfabric.rules.preflight import service_running

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
    paths: imex_service.ImexPaths = field(default_factory=imex_service.ImexPaths)
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
    """The mnnvl bring-up from ``facts.imex`` (:func:`nvfabric.facts.node.collect_imex`).
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
    spec, files, bad = _daemon(imex, opts, peers, decision.socket)
    refusals += bad
    notes.append(f"effective IMEX config: {files[1].path} (from {shipped_path}, which is not "
                 "edited)")
    made = (ChannelNode(channels.channel_path(0), imex.channel_at or channels.channel_path(0),
                        imex.channels.major, 0),) \
        if create and imex.channels.major is not None else ()
    return Prepared("mnnvl", (spec,) if spec else (), files, made, tuple(notes),
                    tuple(refusals), tuple(warnings), opts.resolve(opts.state_dir),
                    imex=ImexPart(decision, imex.channels, peers))


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
    return peers, refusals, [f"IMEX node list: {plural(len(peers), 'entry')} from {source} "
                             f"({node_list_id(p.text for p in peers)})"]


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
            socket: str | None = None
            ) -> tuple[ServiceSpec | None, tuple[PlannedFile, PlannedFile], list[Finding]]:
    """The nvidia-imex spec, the two files it reads (node list, effective config) and their
    refusals. ``socket``: the command socket the DRA driver's host-managed mode queries
    (host path), served by the daemon (IMEX_CMD_UNIX_DOMAIN_PATH)."""
    state = opts.resolve(opts.state_dir)
    cfg_path = os.path.join(state, EFFECTIVE_CFG)
    nodes_path = os.path.join(state, EFFECTIVE_NODES)
    refusals = []
    try:
        text = config.effective(imex.shipped, config.run_overrides(
            keyvalue.parse(imex.shipped or config.MINIMAL_CONFIG), nodes_path,
            opts.resolve(socket) if socket else None))
    except ConfigValueError as err:
        refusals.append(Finding(
            "config_invalid_value", "error", f"IMEX config: {err}",
            "use a shorter --state-dir (IMEX paths are limited to 256 characters)",
            {"key": err.key}))
        text = ""
    try:
        spec: ServiceSpec | None = imex_service.spec(opts.resolve(opts.paths.binary), cfg_path,
                                                     opts.grace_s)
    except ValueError as err:
        refusals.append(Finding("config_invalid_value", "error", str(err), "pass absolute paths",
                                {"key": "path"}))
        spec = None
    files = (PlannedFile(nodes_path, nodes.render(peers), 0o644),
             PlannedFile(cfg_path, text, 0o644))
    return spec, files, refusals


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
                ("--config", None if opts.paths.shipped_config == imex_service.CONFIG
                 else opts.paths.shipped_config), ("--peers", "FILE")))
            + "`), or pass --imex-peers FILE", {"key": "IMEX_NODE_CONFIG_FILE"})
    try:
        return nodes.parse_nodes_config(text), where, None
    except nodes.PeerError as err:
        return (), where, Finding("config_invalid_value", "error", f"{where}: {err}",
                                  "one IP address or host name per line", {"key": "nodes"})


def imex_json(prepared: Prepared) -> dict[str, object]:
    """The ``imex`` object of ``run --json`` on a tray: the ownership, the node list and its
    id, the channel facts."""
    part = prepared.imex
    assert part is not None
    return {**part.ownership.to_json(),
            "node_list": [p.text for p in part.node_list],
            "node_list_id": node_list_id(p.text for p in part.node_list)
            if part.node_list else None,
            "channels": part.channels.to_json()}
