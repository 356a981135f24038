"""``nvfabric imex owner|channel|config|domain``: IMEX on GB200/GB300 compute trays.

- ``owner``: who runs IMEX here (host, dra, dra-host, slurm, nvfabric, none), who creates its
  channels, and the evidence; exit 1 on a conflict.
- ``channel``: the IMEX channel device and nodes; ``--create N`` makes channelN (mode 0666).
- ``config``: patch config.cfg and write nodes_config.cfg from ``--peers FILE``,
  ``--peers-slurm HOSTLIST`` or ``--peer ADDR``; refuses a node list without this host.
- ``domain``: the domain as ``nvidia-imex-ctl -N`` sees it (UP, DEGRADED, DOWN), or a saved
  output of it.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from nvfabric.cli.render import (
    Seconds,
    console,
    guarded,
    json_option,
    print_findings,
    root_option,
    safe,
)
from nvfabric.effects import imex as imex_effects
from nvfabric.effects.stdio import print_json
from nvfabric.facts.imex import ctl
from nvfabric.facts.imex import tray as imex_facts
from nvfabric.facts.inventory import require_root
from nvfabric.facts.nvidia import driver_version
from nvfabric.facts.textfile import read_text_file
from nvfabric.model.commandline import HintContext
from nvfabric.model.errors import NvfabricError, os_error, usage_error
from nvfabric.model.findings import Finding
from nvfabric.model.hostpath import PathEscape, confined, shown_under, under
from nvfabric.model.keyvalue import ConfigValueError
from nvfabric.model.words import plural
from nvfabric.rules.imex import channels, edit, nodes, owner
from nvfabric.rules.imex.nodes import node_list_id
from nvfabric.rules.imex.tables import (
    CONFIG_PATH,
    CTL_TIMEOUT_RANGE_S,
    CTL_TIMEOUT_S,
    IMEX_CTL_BINARY,
)


@click.group("imex")
def imex() -> None:
    """IMEX on multi-node NVLink trays: owner, channels, configuration, domain state."""


def _exit_for(findings: tuple[Finding, ...] | list[Finding]) -> None:
    if any(f.severity == "error" for f in findings):
        sys.exit(1)


owner_option = click.option(
    "--imex-owner", type=click.Choice(owner.OWNERS), default=None,
    help="Who runs IMEX on this node (default: detected).")


@imex.command("owner")
@root_option
@owner_option
@json_option
@guarded
def owner_cmd(root: str, imex_owner: str | None, as_json: bool) -> None:
    """Who runs IMEX here (a live nvfabric run, the DRA driver, Slurm, the host unit, nobody)
    and who creates its channels, with the evidence; exit 1 when two owners claim the node."""
    require_root(root)
    decision = owner.decide(imex_facts.gather_evidence(root), imex_owner)
    findings = [f for f in (decision.conflict, decision.unknown) if f is not None]
    if as_json:
        print_json({**decision.to_json(), "findings": [f.to_json() for f in findings]})
    else:
        con = console()
        runner = f" (run by {decision.runner})" if decision.runner else ""
        con.print(f"[bold]IMEX owner[/bold] {decision.owner}{runner}, {decision.source}; "
                  f"channels: {decision.channels}")
        if decision.run is not None:
            con.print(f"  nvfabric run pid {decision.run.pid}, state dir "
                      f"{safe(decision.run.state_dir)}", emoji=False)
        if decision.slurm_conf is not None:
            con.print(f"  slurm.conf {safe(decision.slurm_conf[0])} "
                      f"({safe(decision.slurm_conf[1])})", emoji=False)
        for r in decision.reasons:
            con.print(f"  - {safe(r)}", emoji=False)
        if decision.evidence:
            con.print("[bold]evidence[/bold]")
            for e in decision.evidence:
                con.print(f"  - {safe(e)}", emoji=False)
        print_findings(con, findings, "problems")
    _exit_for(findings)


@imex.command("channel")
@root_option
@click.option("--create", "create", type=click.IntRange(0, (1 << 20) - 1), default=None,
              metavar="N", help="Make /dev/nvidia-caps-imex-channels/channelN (mode 0666).")
@owner_option
@json_option
@guarded
def channel_cmd(root: str, create: int | None, imex_owner: str | None, as_json: bool) -> None:
    """The IMEX channel device (major from /proc/devices), channel nodes, their mode and owner,
    and the driver's NVreg_CreateImexChannel0 / ImexChannelCount; exit 1 when a channel the
    IMEX owner needs on the host (channel0, none where Slurm's switch plugin or the DRA driver
    make them per job) or the created one is missing or unusable."""
    require_root(root)
    decision = owner.decide(imex_facts.gather_evidence(root), imex_owner)
    facts = imex_facts.read_channels(root)
    created: str | None = None
    present: str | None = None
    if create is not None:
        if facts.major is not None and not channels.needs_create(facts, create):
            # usable already: leave it as it is (the path shown under the root it was read in)
            present = _confine(root, channels.channel_path(create), "IMEX channel",
                               CHANNEL_LINK_HINT)
        else:
            created = _create(root, facts, create)
            facts = imex_facts.read_channels(root)
    required = (create,) if create is not None else decision.required_channels
    findings = channels.check(facts, required, HintContext(root))
    needed = f"channel{create} (--create)" if create is not None else decision.channel_duty
    if as_json:
        print_json({**facts.to_json(), "owner": decision.owner,
                    "channel_owner": decision.channels, "required": list(required),
                    "created": created, "already_present": present,
                    "findings": [f.to_json() for f in findings]})
    else:
        con = console()
        con.print(f"[bold]nvidia-caps-imex-channels[/bold] major "
                  f"{facts.major if facts.major is not None else 'not registered'}")
        con.print(f"ImexChannelCount {_or_not_set(facts.channel_count)}, CreateImexChannel0 "
                  f"{_or_not_set(facts.create_channel0)}")
        for n in facts.nodes:
            dev = f"c {n.major},{n.minor}" if n.kind == "char" else n.kind
            con.print(f"  {safe(n.path)}  {dev}  mode 0{n.mode:03o}  owner {n.uid}:{n.gid}",
                      emoji=False)
        if not facts.nodes:
            con.print("  no channel nodes")
        con.print(f"[bold]checked[/bold] {safe(needed)} (IMEX owner {decision.owner})",
                  emoji=False)
        if created:
            con.print(f"created {safe(created)}")
        if present:
            con.print(f"{safe(present)} exists already (left as it is)")
        print_findings(con, findings, "problems")
    _exit_for(findings)


def _or_not_set(value: object) -> str:
    """A driver parameter as printed: ``not set`` when /proc/driver/nvidia/params lacks it."""
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return str(int(value))
    return str(value)


#: The hint of a channel path that leaves --root through a link (nothing is made there).
CHANNEL_LINK_HINT = ("a link on the channel's path under --root (the channel directory, a "
                     "directory above it, or the channel node itself) leads out of it: remove "
                     "that link (or point it inside the root); nothing was created")


def _create(root: str, facts: channels.ChannelFacts, number: int) -> str:
    """Make channel ``number``; the path it was made at, under ``root`` (exit 2 when that
    path leads out of the root through a link, :func:`_confine`; nothing is made then)."""
    path = _confine(root, channels.channel_path(number), "IMEX channel", CHANNEL_LINK_HINT)
    refusal = channels.create_refusal(facts, number)
    if refusal is not None:
        raise refusal
    assert facts.major is not None
    try:
        imex_effects.create_channel(root, number, facts.major)
    except PathEscape as err:
        raise usage_error(str(err), CHANNEL_LINK_HINT) from None
    except OSError as err:
        raise NvfabricError(Finding(
            "imex_channel_missing", "error",
            f"cannot create {path}: {err.strerror or err}",
            imex_effects.mknod_hint(err) + "; or "
            + channels.fixes(number, facts.major, HintContext(root)),
            {"channel": number, "major": facts.major, "path": path},
        )) from None
    return path


# -- config -----------------------------------------------------------------------------------


def peers_from_options(root: str, peers_file: str | None, peers_slurm: str | None,
                       peer: tuple[str, ...]) -> tuple[nodes.Peer, ...] | None:
    """The node list from exactly one of --peers FILE, --peers-slurm HOSTLIST, --peer ADDR...
    (None when none is given); usage error (exit 2) on bad input."""
    given = [x for x in (peers_file, peers_slurm, peer or None) if x]
    if len(given) > 1:
        raise usage_error("give the node list one way: --peers, --peers-slurm or --peer",
                          "keep one of the three options")
    try:
        if peers_file is not None:
            return nodes.parse_nodes_config(read_text_file(peers_file, "--peers"))
        if peers_slurm is not None:
            return nodes.expand_slurm(peers_slurm)
        if peer:
            return tuple(nodes.parse_entry(p) for p in peer)
    except nodes.PeerError as err:
        raise usage_error(f"IMEX node list: {err}",
                          "one IP address or host name per entry") from None
    return None


def check_node_list(root: str, peers: tuple[nodes.Peer, ...], local: tuple[str, ...],
                    skip_local: bool) -> list[Finding]:
    """Validation and locality findings of a node list for the node under ``root``."""
    findings = list(nodes.validate(peers, driver_version(root)))
    if not skip_local:
        addrs = local or imex_facts.node_addresses(root)
        names = [p.text for p in peers if p.kind == "hostname"]
        problem = nodes.check_local(peers, addrs, imex_facts.local_names(root),
                                    imex_facts.resolve_names(root, names))
        if problem:
            findings.append(problem)
    return findings


@imex.command("config")
@root_option
@click.option("--config", "config_path", default=CONFIG_PATH, show_default=True,
              help="The IMEX config.cfg to patch (host path).")
@click.option("--output", default=None, help="Write the patched config here instead of in place.")
@click.option("--nodes-config", default=None,
              help="Where to write the node list (default: IMEX_NODE_CONFIG_FILE of the config).")
@click.option("--peers", "peers_file", default=None, metavar="FILE",
              help="Node list file: one address or host name per line, # comments.")
@click.option("--peers-slurm", default=None, metavar="HOSTLIST",
              help="Slurm hostlist expression, e.g. \"$SLURM_JOB_NODELIST\" or gb-[01-18].")
@click.option("--peer", multiple=True, metavar="ADDR", help="One node list entry (repeat).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Set a config.cfg key (repeat), e.g. --set DAEMONIZE=0.")
@click.option("--local-address", multiple=True, metavar="ADDR",
              help="This node's addresses, instead of its interfaces (other network namespace).")
@click.option("--skip-local-check", is_flag=True,
              help="Write a node list without this node (for a file shared by every node).")
@click.option("--dry-run", is_flag=True, help="Print the files, write nothing.")
@json_option
@guarded
def config_cmd(root: str, config_path: str, output: str | None, nodes_config: str | None,
               peers_file: str | None, peers_slurm: str | None, peer: tuple[str, ...],
               sets: tuple[str, ...], local_address: tuple[str, ...], skip_local_check: bool,
               dry_run: bool, as_json: bool) -> None:
    """Patch the shipped IMEX config.cfg (comments and order kept, atomic, backup) and write
    nodes_config.cfg; refuse (exit 1, imex_no_local_interface) a node list in which this node
    is not exactly one entry. Every path (options, path-valued keys) stays under --root."""
    require_root(root)
    for what, p in (("--config", config_path), ("--output", output),
                    ("--nodes-config", nodes_config)):
        if p is not None:
            _confine(root, p, what)
    shipped = imex_facts.read_file(root, config_path)
    if shipped is None:
        raise NvfabricError(Finding(
            "config_invalid_value", "error", f"no IMEX config at {shown_under(root, config_path)}",
            "install the nvidia-imex package matching the driver, or give --config",
            {"key": "config", "path": config_path}))
    peers = peers_from_options(root, peers_file, peers_slurm, peer)
    try:
        plan = edit.plan(shipped, sets, nodes_config)
    except ConfigValueError as err:
        raise NvfabricError(Finding(
            "config_invalid_value", "error", f"IMEX config: {err}",
            "fix the value; config.cfg keys take one line each", {"key": err.key}),
            exit_code=2) from None
    for p, what in plan.confine():
        _confine(root, p, what)
    current, move = (peers, False) if peers is not None else _current_node_list(root, plan)
    findings = check_node_list(root, current, local_address, skip_local_check)
    if plan.rewrite is not None:
        findings.append(plan.rewrite)
    errors = [f for f in findings if f.severity == "error"]
    target = output or config_path
    files = edit.files(plan, current, peers is not None or move, target, output is not None)
    written = False
    if not errors and not dry_run:
        _write(root, files)
        written = bool(files)
    # Paths as made, under --root (as `run` lists its files); "config"/"nodes_config" stay
    # host paths: the values the written config names.
    shown = [{"path": under(root, f["path"]), "content": f["content"]} for f in files]
    data: dict[str, Any] = {
        "config": target,
        "nodes_config": plan.nodes_path,
        "node_list": [p.text for p in current],
        "node_list_id": node_list_id(p.text for p in current) if current else None,
        "files": shown,
        "written": written,
        "refused": bool(errors),
        "findings": [f.to_json() for f in findings],
    }
    if as_json:
        print_json(data)
    else:
        _print_config(data, findings, dry_run)
    _exit_for(findings)


def _write(root: str, files: list[dict[str, str]]) -> None:
    """Write ``files`` (host paths) under ``root``, atomically one by one."""
    for f in files:
        try:
            imex_effects.write_file(root, f["path"], f["content"])
        except OSError as err:
            # A full disk is disk_full (exit 1), permissions and the rest say what they are
            # (exit 2): the docs' contract, the same words as `run`.
            problem, code = os_error(err, "cannot write", under(root, f["path"]))
            raise NvfabricError(problem, exit_code=code) from None


def _print_config(data: dict[str, Any], findings: list[Finding], dry_run: bool) -> None:
    """The human form of ``imex config``'s result ``data``."""
    con = console()
    for f in data["files"]:
        if data["written"]:
            verb = "wrote"
        elif data["refused"]:
            verb = "refused, not written:"
        else:
            verb = "would write"
        con.print(f"[bold]{verb} {safe(f['path'])}[/bold]")
        if dry_run:
            sys.stdout.write(f["content"])
    if not data["files"]:
        con.print("nothing to change")
    con.print(f"node list: {plural(len(data['node_list']), 'entry')} "
              f"({safe(data['node_list_id'] or 'empty')})")
    print_findings(con, findings, "problems")


def _confine(root: str, path: str, what: str,
             hint: str = "give an absolute path inside --root, without '..'") -> str:
    """``path`` under ``root`` or a usage error (exit 2): no ``..``, nothing outside root."""
    try:
        return confined(root, path, what)
    except PathEscape as err:
        raise usage_error(str(err), hint) from None


def _current_node_list(root: str, plan: edit.ConfigEdit) -> tuple[tuple[nodes.Peer, ...], bool]:
    """The node list to check when none is given, and whether it moves to the file the config
    is to name (:meth:`~nvfabric.rules.imex.edit.ConfigEdit.moves_list`): the file at the new
    path, else the one at the old path. Usage error when neither exists."""
    path, old_path = plan.nodes_path, plan.old_nodes_path
    where = path
    text = imex_facts.read_file(root, path)
    move = plan.moves_list(text is not None)
    if text is None and old_path != path:
        where, text = old_path, imex_facts.read_file(root, old_path)
    if text is None:
        raise usage_error(f"no node list at {shown_under(root, path)} and none given",
                          "give --peers FILE, --peers-slurm HOSTLIST or --peer ADDR")
    try:
        return nodes.parse_nodes_config(text), move
    except nodes.PeerError as err:
        raise NvfabricError(Finding(
            "config_invalid_value", "error", f"{where}: {err}",
            "one IP address or host name per line", {"key": "nodes", "path": where})) \
            from None


# -- domain -----------------------------------------------------------------------------------


@imex.command("domain")
@root_option
@click.option("--config", "config_path", default=CONFIG_PATH, show_default=True,
              help="The config.cfg the daemon runs with (nvidia-imex-ctl -c).")
@click.option("--ctl", "ctl_path", default=IMEX_CTL_BINARY, show_default=True,
              help="nvidia-imex-ctl (host path, resolved under --root).")
@click.option("--timeout", "timeout_s", type=Seconds(*CTL_TIMEOUT_RANGE_S), default=CTL_TIMEOUT_S,
              show_default=True, help="Hard timeout for each nvidia-imex-ctl call, seconds.")
@click.option("--from-file", "from_file", default=None, metavar="FILE",
              help="Read a saved `nvidia-imex-ctl -N` or `-N -j` output instead ('-': stdin).")
@json_option
@guarded
def domain_cmd(root: str, config_path: str, ctl_path: str, timeout_s: float,
               from_file: str | None, as_json: bool) -> None:
    """The IMEX domain as this node's daemon sees it: UP, DEGRADED or DOWN, with the
    unreachable nodes named; exit 1 unless UP."""
    require_root(root)
    if from_file is not None:
        status = _parse(read_text_file(from_file, "--from-file", 16 << 20,
                                       "the saved text of `nvidia-imex-ctl -N` (or `-N -j`)"),
                        from_file)
    else:
        status = _query(root, ctl_path, config_path, timeout_s)
    finding = status.finding()
    findings = [finding] if finding else []
    if as_json:
        print_json({**status.to_json(), "findings": [f.to_json() for f in findings]})
    else:
        con = console()
        style = "green" if status.state == "UP" else "bold red"
        when = f", {status.timestamp}" if status.timestamp else ""
        con.print(f"[bold]IMEX domain[/bold] [{style}]{safe(status.state)}[/]"
                  f" ({plural(len(status.nodes), 'node')}{safe(when)})", emoji=False)
        for n in status.nodes:
            con.print(f"  node {n.node_id:>2}  {safe(f'{n.host:<40}')} {safe(f'{n.status:<12}')} "
                      f"{safe(n.version or '')}", emoji=False)
        print_findings(con, findings, "problems")
    _exit_for(findings)


def _query(root: str, ctl_path: str, config_path: str, timeout_s: float) -> ctl.DomainStatus:
    """:func:`nvfabric.facts.imex.ctl.query_domain` with ``--ctl`` and ``--config`` under
    ``root`` (on the node itself as given: a bare name is looked up in PATH)."""
    binary, cfg = ctl_path, config_path
    if root != "/":
        binary, cfg = _joined(root, ctl_path, "--ctl"), _joined(root, config_path, "--config")
    return ctl.query_domain(binary, cfg, timeout_s)


def _joined(root: str, path: str, what: str) -> str:
    """``path`` under ``root`` (:func:`nvfabric.model.hostpath.under`); a usage error (exit 2)
    naming ``what`` for a path that would leave the root."""
    try:
        return under(root, path)
    except PathEscape as err:
        raise usage_error(f"{what}: {err}", "give a path inside --root, without '..'") from None


def _parse(text: str, where: str) -> ctl.DomainStatus:
    try:
        return ctl.parse_domain(text)
    except ValueError as err:
        raise usage_error(f"{where}: {err}",
                          "give the output of `nvidia-imex-ctl -N` or `-N -j`") from None
